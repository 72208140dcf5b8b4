"""Fault isolation on the real server + real torch engine (tiny Qwen pair).

A failure inside one request fails that request alone with a clear error, while healthy
requests running beside it complete and the server stays healthy:
- faults injected at the engine's seams, chosen per request by its seed / stop string: an
  exception in the drafter, in the matcher, in the detokenizer (tokenizer error), and an
  out-of-memory error in the target's prefill forward.
A REAL grammar dead end mid-generation (a left-recursive rule with no base case after "ab")
is not a failure: the request is answered with the text so far and the choice's error.
Then the engine's worker dies (SystemExit escaping a step): the in-flight request fails,
`/health` turns 503 with Retry-After, and a new request fails at once with a 503 (never a hang).
Each test prints its figures.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import torch
from gateway_harness import API_KEY, RunningServer, make_settings, start_server

HEADERS = {"Authorization": f"Bearer {API_KEY}"}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
          "required": ["a", "b"], "additionalProperties": False}
DEAD_END = 'root ::= "ab" rest\nrest ::= rest "c"\n'
TOKENIZER_FAULT_STOP = "<<tokenizer-fault>>"
SEED_DRAFTER, SEED_MATCHER, SEED_OOM, SEED_WORKER = 9001, 9002, 9004, 9999


class _Fault(RuntimeError):
    pass


def _install_faults(engine: Any) -> None:
    """Wrap the real engine's seams so that requests with a chosen seed (or stop string) fail."""
    import engine.torch_engine.engine as torch_engine_module

    decoder = engine.decoder
    drafter = decoder.drafter
    real_propose = drafter.propose

    def propose(ctx: Any, *, k: int, span: int = 0) -> Any:
        if ctx.request.sampling.seed == SEED_DRAFTER:
            raise _Fault("injected drafter exception")
        return real_propose(ctx, k=k, span=span)

    drafter.propose = propose
    real_new_sequence = decoder.new_sequence

    def new_sequence(request: Any) -> Any:
        seq = real_new_sequence(request)
        if request.sampling.seed == SEED_MATCHER and seq.matcher is not None:
            def fill_masks(*args: Any, **kwargs: Any) -> int:
                raise _Fault("injected matcher exception")
            seq.matcher.fill_masks = fill_masks
        if request.sampling.seed == SEED_OOM:
            def extend(*args: Any, **kwargs: Any) -> Any:
                raise torch.OutOfMemoryError("injected: CPU out of memory allocating the prefill activations")
            seq.target_kv.extend = extend
        return seq

    decoder.new_sequence = new_sequence
    real_detok = torch_engine_module.Detokenizer

    class FaultyDetokenizer(real_detok):  # type: ignore[misc, valid-type]
        def push(self, token_ids: Any) -> Any:
            if TOKENIZER_FAULT_STOP in self.stop:
                raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "injected tokenizer error")
            return super().push(token_ids)

    torch_engine_module.Detokenizer = FaultyDetokenizer  # type: ignore[misc]
    real_step = engine._step

    def step(slot: Any, *, speculate: bool) -> None:
        if slot.request.sampling.seed == SEED_WORKER:
            raise SystemExit("injected: the engine worker dies")
        real_step(slot, speculate=speculate)

    engine._step = step


@pytest.fixture(scope="module")
def faulty_server(tiny_engine_factory: Callable[..., Any]) -> Iterator[RunningServer]:
    import engine.torch_engine.engine as torch_engine_module
    from gateway.app import create_app

    real_detok = torch_engine_module.Detokenizer
    spy = tiny_engine_factory(max_num_seqs=16, max_spec_concurrency=16)  # speculate at every step
    _install_faults(spy._inner)
    app = create_app(make_settings(), engine=spy)
    try:
        yield from start_server(app, spy)
    finally:
        torch_engine_module.Detokenizer = real_detok  # type: ignore[misc]


def _model(base: str) -> str:
    return str(httpx.get(base + "/v1/models", headers=HEADERS).json()["data"][0]["id"])


def _chat(base: str, body: dict[str, Any], *, stream: bool = False, timeout: float = 120) -> tuple[int, dict[str, Any] | str]:
    if not stream:
        r = httpx.post(base + "/v1/chat/completions", headers=HEADERS, json=body, timeout=timeout)
        return r.status_code, r.json()
    with httpx.stream("POST", base + "/v1/chat/completions", headers=HEADERS, json={**body, "stream": True},
                      timeout=timeout) as r:
        text = "".join(r.iter_text())
        return r.status_code, text


def _msg(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_each_fault_fails_only_its_request(faulty_server: RunningServer, openapi: Any) -> None:
    base = faulty_server.base_url
    model = _model(base)
    healthy = [
        {"model": model, "messages": _msg("one"), "max_tokens": 40, "ignore_eos": True, "seed": 1},
        {"model": model, "messages": _msg("two"), "max_tokens": 40, "seed": 2,
         "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}},
        {"model": model, "messages": _msg("three"), "max_tokens": 40, "ignore_eos": True, "seed": 3},
    ]
    faults: dict[str, dict[str, Any]] = {
        "drafter exception": {"model": model, "messages": _msg("b"), "max_tokens": 20, "seed": SEED_DRAFTER},
        "matcher exception": {"model": model, "messages": _msg("c"), "max_tokens": 20, "seed": SEED_MATCHER,
                              "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}},
        "tokenizer error": {"model": model, "messages": _msg("d"), "max_tokens": 20, "seed": 7,
                            "stop": [TOKENIZER_FAULT_STOP]},
        "out of memory (prefill)": {"model": model, "messages": _msg("e " * 200), "max_tokens": 20,
                                    "seed": SEED_OOM},
    }
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(healthy) + 2 * len(faults)) as pool:
        ok_futs = [pool.submit(_chat, base, body, stream=i == 0) for i, body in enumerate(healthy)]
        bad_futs = {name: pool.submit(_chat, base, body) for name, body in faults.items()}
        bad_stream = {name: pool.submit(_chat, base, body, stream=True) for name, body in faults.items()}
        ok = [f.result() for f in ok_futs]
        bad = {name: f.result() for name, f in bad_futs.items()}
        bad_s = {name: f.result() for name, f in bad_stream.items()}
    elapsed = time.perf_counter() - started
    for status, payload in ok:
        assert status == 200, payload
        if isinstance(payload, str):
            assert "data: [DONE]" in payload and '"error"' not in payload
    print(f"\nfault isolation: {len(faults)} faults x 2 (JSON + stream) beside {len(healthy)} healthy requests, "
          f"{elapsed:.1f} s")
    for name, (status, payload) in bad.items():
        assert isinstance(payload, dict) and "error" in payload, (name, status, payload)
        openapi.validate(payload, "ErrorResponse")
        err = payload["error"]
        assert status in (400, 500), (name, status, payload)
        s_status, s_text = bad_s[name]
        assert isinstance(s_text, str)
        # a stream fails before its 200 (status + envelope) or in-band (an error event, then [DONE])
        assert s_status == status or ('"error"' in s_text and s_text.rstrip().endswith("data: [DONE]")), s_text
        print(f"  {name:26s} -> HTTP {status} {err['code']}: {err['message'][:90]}")
    for name in ("drafter exception", "matcher exception", "tokenizer error", "out of memory (prefill)"):
        assert bad[name][0] == 500 and bad[name][1]["error"]["code"] == "generation_failed", name  # type: ignore[index]
    assert "out of memory" in bad["out of memory (prefill)"][1]["error"]["message"].lower()  # type: ignore[index]
    health = httpx.get(base + "/health")
    assert health.status_code == 200
    assert faulty_server.engine.live_request_ids() == set()
    assert faulty_server.engine.dead_reason is None
    print(f"  healthy requests: {sum(s == 200 for s, _ in ok)}/{len(ok)} completed; /health {health.status_code}; "
          f"live engine requests after: {len(faulty_server.engine.live_request_ids())}")

def test_a_grammar_dead_end_answers_with_what_it_has(faulty_server: RunningServer, openapi: Any) -> None:
    """A REAL dead end mid-generation (after "ab" the grammar has no way on): a 200 with the
    text so far, finish_reason "stop" and the choice's error grammar_dead_end, streamed the
    same, counted on /metrics; never a 400 after the work, never an unconstrained token."""
    base = faulty_server.base_url
    body = {"model": _model(base), "messages": _msg("a"), "max_tokens": 20, "seed": 5,
            "structured_outputs": {"grammar": DEAD_END}}

    def dead_ends() -> float:
        text = httpx.get(base + "/metrics", headers=HEADERS).text
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("specgate_grammar_dead_ends_total"))

    before = dead_ends()
    status, payload = _chat(base, body)
    assert status == 200 and isinstance(payload, dict), payload
    openapi.validate(payload, "CreateChatCompletionResponse")
    (choice,) = payload["choices"]
    assert choice["message"]["content"] == "ab" and choice["finish_reason"] == "stop", choice
    assert choice["error"]["code"] == "grammar_dead_end", choice
    status, text = _chat(base, body, stream=True)
    assert status == 200 and isinstance(text, str) and text.rstrip().endswith("data: [DONE]"), text
    chunks = [json.loads(line[len("data: "):]) for line in text.splitlines()
              if line.startswith("data: {")]
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    last = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert streamed == "ab" and last[-1]["finish_reason"] == "stop", text
    assert last[-1]["error"]["code"] == "grammar_dead_end"
    assert dead_ends() == before + 2



def test_dead_worker_turns_health_503_and_fails_fast(faulty_server: RunningServer, openapi: Any) -> None:
    """Runs last in this module: it kills the module's engine."""
    base = faulty_server.base_url
    model = _model(base)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        inflight = pool.submit(_chat, base, {"model": model, "messages": _msg("long"), "max_tokens": 900,
                                             "ignore_eos": True, "seed": 11}, stream=True)
        time.sleep(0.5)
        killer = pool.submit(_chat, base, {"model": model, "messages": _msg("die"), "max_tokens": 5,
                                           "seed": SEED_WORKER})
        k_status, k_payload = killer.result(timeout=60)
        i_status, i_text = inflight.result(timeout=60)
    assert k_status == 503, k_payload
    assert isinstance(i_text, str) and ("engine_unavailable" in i_text or i_status == 503), i_text[-300:]
    health = httpx.get(base + "/health")
    assert health.status_code == 503 and int(health.headers["Retry-After"]) >= 1
    openapi.validate(health.json(), "ErrorResponse")
    assert health.json()["error"]["code"] == "engine_unavailable"
    assert "SystemExit" in health.json()["error"]["message"]
    t0 = time.perf_counter()
    r = httpx.post(base + "/v1/chat/completions", headers=HEADERS, timeout=10,
                   json={"model": model, "messages": _msg("hello?"), "max_tokens": 5})
    fail_s = time.perf_counter() - t0
    assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unavailable"
    assert int(r.headers["Retry-After"]) >= 1
    assert fail_s < 2.0
    print(f"\ndead engine worker: /health {health.status_code} ({health.json()['error']['message'][:80]}); "
          f"new request answered 503 in {fail_s * 1000:.0f} ms; in-flight stream ended with an error event")

