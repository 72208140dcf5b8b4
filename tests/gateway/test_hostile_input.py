"""Hostile bytes and pathological constraints against the real server (tiny engine, default
limits): every one is a 400 (never a 5xx, never FastAPI's `{"detail": ...}`) in OpenAI's
envelope naming what is wrong, or compiles within the limit. Prints how many were tried and
the worst answer time."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

FIELDS_WRONG_TYPES: list[tuple[str, Any]] = [
    ("model", 1), ("messages", "hi"), ("messages", {"role": "user"}), ("temperature", "hot"),
    ("top_p", [1]), ("n", 1.5), ("max_tokens", "ten"), ("stream", "yes"), ("stop", 3), ("seed", "s"),
    ("response_format", "json"), ("tools", {"type": "function"}), ("tool_choice", 7),
    ("stream_options", True), ("logit_bias", [1]), ("user", 5), ("metadata", "m"),
    ("structured_outputs", []), ("prediction", "text"), ("max_completion_tokens", []),
]


def _bodies(model: str) -> list[tuple[str, bytes, str]]:
    """(name, raw body, expected error code)."""
    ok = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    raw_ok = json.dumps(ok)
    out: list[tuple[str, bytes, str]] = [
        ("invalid UTF-8 in a string", raw_ok.replace('"hi"', '"h\\u0069').encode()[:-20] + b'\xff\xfe"}]}',
         "invalid_encoding"),
        ("invalid UTF-8 (overlong)", raw_ok.encode().replace(b'"hi"', b'"\xc0\xafhi"'), "invalid_encoding"),
        ("Latin-1 body", raw_ok.replace("hi", "caf\u00e9").encode("latin-1"), "invalid_encoding"),
        ("raw control char in a string", raw_ok.replace('"hi"', '"h\x01i"').encode(), "invalid_json"),
        ("raw newline in a string", raw_ok.replace('"hi"', '"h\ni"').encode(), "invalid_json"),
        ("NUL escape in content", raw_ok.replace('"hi"', '"h\\u0000i"').encode(), "invalid_value"),
        ("lone high surrogate", raw_ok.replace('"hi"', '"\\ud800"').encode(), "invalid_value"),
        ("lone low surrogate in a key", raw_ok.replace('"max_tokens"', '"\\udc00"').encode(), "invalid_value"),
        ("duplicated key (top level)", raw_ok[:-1].encode() + b', "max_tokens": 3}', "duplicate_key"),
        ("duplicated key (nested)", raw_ok.replace('"role": "user"', '"role": "user", "role": "system"').encode(),
         "duplicate_key"),
        ("truncated JSON", raw_ok.encode()[:-3], "invalid_json"),
        ("JSON array body", b"[1, 2]", "invalid_json"),
        ("JSON string body", b'"hello"', "invalid_json"),
        ("NaN literal", raw_ok.replace('"max_tokens": 2', '"temperature": NaN').encode(), "invalid_value"),
        ("Infinity literal", raw_ok.replace('"max_tokens": 2', '"temperature": Infinity').encode(), "invalid_value"),
        ("deep nesting (10k)", b'{"model": "m", "metadata": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", "invalid_json"),
        ("huge integer", raw_ok.replace('"max_tokens": 2', '"max_tokens": ' + "9" * 5000).encode(),
         "invalid_json"),
        ("BOM prefix", b"\xef\xbb\xbf" + raw_ok.encode(), "invalid_json"),
    ]
    for field, value in FIELDS_WRONG_TYPES:
        body = dict(ok)
        body[field] = value
        out.append((f"wrong type: {field}={value!r}", json.dumps(body).encode(), "invalid_value"))
    return out


def test_hostile_bytes_are_named_400s(http: Any, openapi: Any, model_id: str) -> None:
    worst = 0.0
    codes: dict[str, int] = {}
    cases = _bodies(model_id)
    for name, raw, code in cases:
        t0 = time.perf_counter()
        r = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
        worst = max(worst, time.perf_counter() - t0)
        assert r.status_code == 400, (name, r.status_code, r.text[:300])
        data = r.json()
        openapi.validate(data, "ErrorResponse")
        assert "detail" not in data
        err = data["error"]
        assert err["message"], name
        if code != "invalid_value":  # wrong types: pydantic's own codes vary; the param must name the field
            assert err["code"] == code, (name, err)
        codes[err["code"] or "none"] = codes.get(err["code"] or "none", 0) + 1
    wrong_types = [c for c in cases if c[0].startswith("wrong type")]
    for name, raw, _ in wrong_types:
        field = name.split(": ")[1].split("=")[0]
        r = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
        assert (r.json()["error"]["param"] or "").startswith(field), (name, r.json())
    print(f"\nhostile bodies: {len(cases)} tried, all 400 in the OpenAI envelope ({codes}); "
          f"slowest answer {worst * 1000:.0f} ms")


def _deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


PATHOLOGICAL: list[tuple[str, dict[str, Any], int]] = [
    ("$ref self-cycle, no base case", {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, 400),
    ("$ref 2-cycle", {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, 400),
    ("dangling $ref", {"$ref": "#/$defs/missing"}, 400),
    ("remote $ref", {"$ref": "http://example.com/schema.json"}, 400),
    ("recursive (linked list): fine", {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}},
                                       "$ref": "#/$defs/n"}, 200),
    ("deep nesting (40 objects)", _deep(40), 400),
    ("nesting within the default limit (20 objects)", _deep(20), 200),
    ("huge enum (5000)", {"enum": [f"value_{i}" for i in range(5000)]}, 400),
    ("enum at the default limit (1024)", {"enum": [f"v{i}" for i in range(1024)]}, 200),
    ("type nonsense", {"type": "nonsense"}, 400),
    ("schema is a list", [1, 2], 400),
]


@pytest.mark.parametrize("index", range(len(PATHOLOGICAL)), ids=[p[0] for p in PATHOLOGICAL])
def test_pathological_schemas_are_refused_by_name_or_compile(http: Any, openapi: Any, model_id: str, index: int) -> None:
    name, schema, status = PATHOLOGICAL[index]
    t0 = time.perf_counter()
    r = http.post("/v1/chat/completions", json={
        "model": model_id, "messages": [{"role": "user", "content": "go"}], "max_tokens": 8,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    elapsed = time.perf_counter() - t0
    assert r.status_code == status, (name, r.text[:300])
    if status == 400:
        openapi.validate(r.json(), "ErrorResponse")
        err = r.json()["error"]
        assert (err["param"] or "").startswith("response_format"), err
        print(f"\n  {name}: 400 {err['code']} in {elapsed * 1000:.0f} ms: {err['message'][:100]}")
    else:
        print(f"\n  {name}: 200 in {elapsed * 1000:.0f} ms")
    assert elapsed < 12.0


@pytest.mark.parametrize(("name", "patch", "status"), [
    ("catastrophic-backtracking regex (a+)+$", {"structured_outputs": {"regex": "(a+)+$"}}, 200),
    ("catastrophic-backtracking regex (a|aa)*b", {"structured_outputs": {"regex": "(a|aa)*b"}}, 200),
    ("invalid regex", {"structured_outputs": {"regex": "(["}}, 400),
    ("giant grammar (70 KB)", {"structured_outputs": {"grammar": "root ::= " + " | ".join(
        f'"w{i}"' for i in range(10_000))}}, 400),
    ("grammar with no base case", {"structured_outputs": {"grammar": "root ::= root \"a\""}}, 400),
    ("huge choice list", {"structured_outputs": {"choice": [f"c{i}" for i in range(5000)]}}, 400),
])
def test_pathological_patterns(http: Any, openapi: Any, model_id: str, name: str, patch: dict[str, Any], status: int) -> None:
    t0 = time.perf_counter()
    r = http.post("/v1/chat/completions", json={
        "model": model_id, "messages": [{"role": "user", "content": "go"}], "max_tokens": 8, **patch})
    elapsed = time.perf_counter() - t0
    assert r.status_code == status, (name, r.text[:300])
    if status == 400:
        openapi.validate(r.json(), "ErrorResponse")
        print(f"\n  {name}: 400 {r.json()['error']['code']} in {elapsed * 1000:.0f} ms: "
              f"{r.json()['error']['message'][:100]}")
    else:
        print(f"\n  {name}: 200 in {elapsed * 1000:.0f} ms")
    assert elapsed < 12.0
