#!/usr/bin/env bash
# Build the vLLM 0.34 checking environment for tests/engine/vllm/test_vllm_mrv2.py: the
# Python files of the real vllm==0.34.0 wheel (no dependencies, no compiled kernels: 190 MB
# on disk, a 239 MB download), imported with this project's .venv (torch 2.13 CPU etc.).
# Never installed into .venv. Usage: scripts/vllm034_env.sh [DIR]  (default
# ~/.cache/specgate/vllm-0.34.0; the test reads SPECGATE_VLLM034_DIR, same default).
set -euo pipefail
DIR="${1:-${SPECGATE_VLLM034_DIR:-$HOME/.cache/specgate/vllm-0.34.0}}"
VERSION=0.34.0
if [ -f "$DIR/vllm/__init__.py" ] && grep -q "$VERSION" "$DIR"/vllm-*.dist-info/METADATA 2>/dev/null; then
  echo "vLLM $VERSION checking environment already at $DIR"; exit 0
fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
python3 -m pip download "vllm==$VERSION" --no-deps --only-binary=:all: -d "$TMP" -q
mkdir -p "$DIR"
python3 - "$TMP" "$DIR" <<'PY'
import pathlib, sys, zipfile
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = next(src.glob("vllm-*.whl"))
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if not (n.endswith(".so") or ".so." in n)]
    z.extractall(dst, members=names)
print(f"extracted {len(names)} files of {wheel.name} into {dst}")
PY
