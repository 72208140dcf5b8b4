"""Every request limit answers a 400 (413 for the body) in OpenAI's envelope naming the field
and the limit, and a request exactly at the limit passes; against a real server with small
limits. The grammar compile-time limit refuses a slow compile by name while `/health` and a
generation keep answering (the compile runs off the event loop and off the engine worker).
Prints one line per limit: setting, value, what was sent, the answer."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from gateway_harness import API_KEY, RunningServer, make_settings, start_server

HEADERS = {"Authorization": f"Bearer {API_KEY}"}
LIMITS = {"max_messages": 4, "max_tools": 2, "max_stop_sequences": 2, "max_stop_chars": 8,
          "max_schema_bytes": 1024, "max_schema_depth": 8, "max_enum_size": 16, "max_grammar_bytes": 200,
          "max_n": 2, "max_tokens_cap": 50, "max_body_bytes": 32 * 1024, "grammar_compile_timeout_s": 0.5}


@pytest.fixture(scope="module")
def limited(tiny_engine_factory: Callable[..., Any]) -> Iterator[RunningServer]:
    from gateway.app import create_app

    engine = tiny_engine_factory(max_model_len=256, grammar_compile_timeout_s=LIMITS["grammar_compile_timeout_s"])
    app = create_app(make_settings(**{**LIMITS, "max_model_len": 256}), engine=engine)
    yield from start_server(app, engine)


SLOW_COMPILE_LIMIT_S = 0.02  # the regex below takes xgrammar ~0.3 s on a quiet 2-core EPYC, ~5 s under load


@pytest.fixture(scope="module")
def compile_limited(tiny_engine_factory: Callable[..., Any]) -> Iterator[RunningServer]:
    from gateway.app import create_app

    engine = tiny_engine_factory(max_model_len=256, grammar_compile_timeout_s=SLOW_COMPILE_LIMIT_S)
    app = create_app(make_settings(max_model_len=256, grammar_compile_timeout_s=SLOW_COMPILE_LIMIT_S), engine=engine)
    yield from start_server(app, engine)


def _msgs(n: int) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(n - 1)] + [
        {"role": "user", "content": "go"}]


def _tool(i: int) -> dict[str, Any]:
    return {"type": "function", "function": {"name": f"f{i}", "parameters": {"type": "object", "properties": {}}}}


def _nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def _rf(schema: Any) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


# (limit name, patch over the limit, param the error names, patch at the limit)
CASES: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = [
    ("max_messages", {"messages": _msgs(5)}, "messages", {"messages": _msgs(4)}),
    ("max_tools", {"tools": [_tool(i) for i in range(3)]}, "tools", {"tools": [_tool(i) for i in range(2)]}),
    ("max_stop_sequences", {"stop": ["a", "b", "c"]}, "stop", {"stop": ["a", "b"]}),
    ("max_stop_chars", {"stop": ["x" * 9]}, "stop[0]", {"stop": ["x" * 8]}),
    ("max_schema_bytes", _rf({"type": "object", "description": "d" * 1100}), "response_format.json_schema.schema",
     _rf({"type": "object", "description": "d" * 900})),
    ("max_schema_depth", _rf(_nested(5)), "response_format.json_schema.schema", _rf(_nested(3))),
    ("max_schema_depth", {"tools": [{"type": "function", "function": {"name": "f", "parameters": _nested(5)}}]},
     "tools[0].function.parameters",
     {"tools": [{"type": "function", "function": {"name": "f", "parameters": _nested(3)}}]}),
    ("max_enum_size", _rf({"enum": list(range(17))}), "response_format.json_schema.schema",
     _rf({"enum": list(range(16))})),
    ("max_enum_size", {"structured_outputs": {"choice": [f"c{i}" for i in range(17)]}}, "structured_outputs.choice",
     {"structured_outputs": {"choice": [f"c{i}" for i in range(16)]}}),
    ("max_grammar_bytes", {"structured_outputs": {"regex": "a" * 201}}, "structured_outputs.regex",
     {"structured_outputs": {"regex": "a" * 20}}),
    ("max_grammar_bytes", {"structured_outputs": {"grammar": 'root ::= "' + "a" * 200 + '"'}},
     "structured_outputs.grammar", {"structured_outputs": {"grammar": 'root ::= "ok"'}}),
    ("max_n", {"n": 3}, "n", {"n": 2}),
    ("max_tokens_cap", {"max_tokens": 51}, "max_tokens", {"max_tokens": 50}),
    ("max_model_len", {"messages": [{"role": "user", "content": "word " * 300}]}, "messages",
     {"messages": [{"role": "user", "content": "word " * 100}]}),
]


@pytest.mark.parametrize(("limit", "over", "param", "at"), CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_limit_is_a_named_400_and_the_limit_itself_passes(
    limited: RunningServer, openapi: Any, limit: str, over: dict[str, Any], param: str, at: dict[str, Any]
) -> None:
    base = limited.base_url
    model = httpx.get(base + "/v1/models", headers=HEADERS).json()["data"][0]["id"]
    body = {"model": model, "messages": _msgs(1), "max_tokens": 2, **over}
    r = httpx.post(base + "/v1/chat/completions", headers=HEADERS, json=body, timeout=60)
    assert r.status_code == 400, r.text
    openapi.validate(r.json(), "ErrorResponse")
    err = r.json()["error"]
    assert err["param"] == param, err
    assert err["code"] in ("limit_exceeded", "invalid_value", "context_length_exceeded"), err
    ok = httpx.post(base + "/v1/chat/completions", headers=HEADERS, timeout=60,
                    json={"model": model, "messages": _msgs(1), "max_tokens": 2, **at})
    assert ok.status_code == 200, ok.text
    print(f"\n  {limit}={LIMITS.get(limit, 256)}: over -> 400 {err['code']} param={err['param']}: "
          f"{err['message'][:80]}; at the limit -> 200")


def test_body_size_limit_is_413(limited: RunningServer, openapi: Any) -> None:
    r = httpx.post(limited.base_url + "/v1/chat/completions", headers=HEADERS,
                   json={"model": "m", "messages": [{"role": "user", "content": "x" * 40_000}]})
    assert r.status_code == 413
    openapi.validate(r.json(), "ErrorResponse")
    assert r.json()["error"]["code"] == "request_too_large"


def test_slow_compile_is_refused_by_name_without_stalling_others(compile_limited: RunningServer, openapi: Any) -> None:
    base = compile_limited.base_url
    model = httpx.get(base + "/v1/models", headers=HEADERS).json()["data"][0]["id"]
    slow = {"model": model, "messages": _msgs(1), "max_tokens": 2,
            "structured_outputs": {"regex": "[a-z]{1,3000}"}}  # 14 bytes, ~15x the limit to compile
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        t0 = time.perf_counter()
        fut = pool.submit(httpx.post, base + "/v1/chat/completions", headers=HEADERS, json=slow, timeout=60)
        time.sleep(0.1)
        health_ms = []
        for _ in range(3):
            t = time.perf_counter()
            assert httpx.get(base + "/health").status_code == 200
            health_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        gen = httpx.post(base + "/v1/chat/completions", headers=HEADERS, timeout=60,
                         json={"model": model, "messages": _msgs(1), "max_tokens": 4})
        gen_ms = (time.perf_counter() - t) * 1000
        r = fut.result()
        refused_s = time.perf_counter() - t0
    assert gen.status_code == 200
    assert r.status_code == 400, r.text
    openapi.validate(r.json(), "ErrorResponse")
    err = r.json()["error"]
    assert err["code"] == "invalid_grammar" and f"exceeded {SLOW_COMPILE_LIMIT_S:g} s" in err["message"], err
    assert err["param"] == "structured_outputs"
    assert refused_s < 3.0
    assert max(health_ms) < 500
    print(f"\ncompile limit {SLOW_COMPILE_LIMIT_S} s: slow regex refused in {refused_s:.2f} s ({err['message']}); meanwhile "
          f"/health max {max(health_ms):.0f} ms, a 4-token generation {gen_ms:.0f} ms")
