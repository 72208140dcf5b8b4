#!/usr/bin/env bash
# Create or refresh the project-local virtual environment (.venv) reproducibly.
# Idempotent: re-installs only when pyproject.toml, constraints.txt or this script change.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${SPECGATE_PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ ! -x .venv/bin/python ]; then
    echo "[bootstrap] creating .venv with $py" >&2
    "$py" -m venv .venv
fi
stamp=.venv/.specgate-installed
want="$(cat pyproject.toml constraints.txt scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi
echo "[bootstrap] installing dependencies into .venv (first run takes a few minutes)" >&2
pip=(.venv/bin/python -m pip --disable-pip-version-check -q)
"${pip[@]}" install --upgrade "pip>=24"
# torch first, exactly: a looser range would pull a multi-GB CUDA build.
"${pip[@]}" install "torch==2.13.0"
# xgrammar without its dependency on triton (unneeded here, 1 GB); its other deps are ours.
"${pip[@]}" install --no-deps "xgrammar==0.2.8"
"${pip[@]}" install -c constraints.txt -e ".[dev]"
echo "$want" > "$stamp"
