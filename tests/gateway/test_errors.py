"""Every error is OpenAI's envelope with the right status, `param` and `code`: validation
(400, never 422), malformed JSON, unknown fields, unsupported values, grammar errors naming
keyword and path, unknown tool, context overflow, unknown model (404), auth (401), body size
(413). Against the real server and engine."""

from __future__ import annotations

from typing import Any

import openai
import pytest

MESSAGES = [{"role": "user", "content": "hi"}]


def _err(http: Any, openapi: Any, body: Any, status: int = 400, *, raw: bytes | None = None) -> dict[str, Any]:
    if raw is not None:
        r = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    else:
        r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == status, r.text
    data = r.json()
    openapi.validate(data, "ErrorResponse")
    return data["error"]


def test_malformed_json_is_400(http: Any, openapi: Any) -> None:
    err = _err(http, openapi, None, raw=b'{"model": "x", "messages": [')
    assert err["code"] == "invalid_json" and "JSON" in err["message"]


@pytest.mark.parametrize(
    ("patch", "param"),
    [
        ({"temperature": 5}, "temperature"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": []}, "messages"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"n": "two"}, "n"),
        ({"top_p": 0}, "top_p"),
    ],
)
def test_bad_parameters_are_400_with_param(http: Any, openapi: Any, model_id: str, patch: dict[str, Any], param: str) -> None:
    err = _err(http, openapi, {"model": model_id, "messages": MESSAGES, **patch})
    assert err["param"] == param and err["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("patch", "param"),
    [
        ({"frobnicate": 1}, "frobnicate"),
        ({"logprobs": True}, "logprobs"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"logit_bias": {"42": 3}}, "logit_bias"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
         "messages[0].content[0].type"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"functions": [{"name": "f"}]}, "functions"),
    ],
)
def test_unknown_or_unsupported_fields_are_named(http: Any, openapi: Any, model_id: str, patch: dict[str, Any], param: str) -> None:
    err = _err(http, openapi, {"model": model_id, "messages": MESSAGES, **patch})
    assert err["param"] == param, err


def test_harmless_openai_fields_are_accepted(http: Any, model_id: str) -> None:
    r = http.post("/v1/chat/completions", json={
        "model": model_id, "messages": MESSAGES, "max_tokens": 2, "user": "u1", "metadata": {"a": "b"},
        "store": False, "logit_bias": {}, "logprobs": False, "presence_penalty": 0, "service_tier": "auto",
        "parallel_tool_calls": True, "modalities": ["text"],
    })
    assert r.status_code == 200, r.text


def test_unenforceable_strict_schema_names_keyword_and_path(http: Any, openapi: Any, model_id: str) -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
              "required": ["tags"], "additionalProperties": False}
    err = _err(http, openapi, {"model": model_id, "messages": MESSAGES, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}})
    assert "uniqueItems" in err["message"] and "/properties/tags" in err["message"]
    assert err["param"].startswith("response_format.json_schema")


def test_unknown_keyword_in_strict_schema_is_a_400_naming_it(http: Any, openapi: Any, model_id: str) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLenght": 5}},
              "required": ["name"], "additionalProperties": False}
    err = _err(http, openapi, {"model": model_id, "messages": MESSAGES, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}})
    assert err["message"] == "unknown keyword 'maxLenght' at /properties/name"
    assert err["param"].startswith("response_format.json_schema")


@pytest.mark.parametrize(
    ("patch", "param_prefix"),
    [
        ({"structured_outputs": {"regex": "(["}}, "structured_outputs"),
        ({"response_format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: ((("}}},
         "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
         "response_format"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        # tool calling: a schema that cannot be enforced, duplicate names, an assistant call
        # whose arguments are not JSON (tool_choice omitted: "auto" is enforced too)
        ({"tools": [{"type": "function", "function": {"name": "f"}},
                    {"type": "function", "function": {"name": "g", "parameters": {
                        "type": "object", "properties": {"x": {"type": "string", "pattern": "(?<=a)b"}}}}}]},
         "tools[1].function.parameters"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}] * 2}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}],
          "messages": [*MESSAGES, {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                   "function": {"name": "f", "arguments": "{not json"}}]}]},
         "messages[1].tool_calls[0].function.arguments"),
    ],
)
def test_grammar_and_tool_errors_are_400(http: Any, openapi: Any, model_id: str, patch: dict[str, Any], param_prefix: str) -> None:
    err = _err(http, openapi, {"model": model_id, "messages": MESSAGES, **patch})
    assert err["param"] and err["param"].startswith(param_prefix), err


def test_prompt_longer_than_context_is_400(http: Any, openapi: Any, model_id: str) -> None:
    long = [{"role": "user", "content": "word " * 1500}]
    err = _err(http, openapi, {"model": model_id, "messages": long})
    assert err["code"] == "context_length_exceeded" and err["param"] == "messages"
    err = _err(http, openapi, {"model": model_id, "messages": [{"role": "user", "content": "word " * 500}],
                               "max_completion_tokens": 900})
    assert err["code"] == "context_length_exceeded" and err["param"] == "max_completion_tokens"


def test_unknown_model_is_404(client: Any, openapi: Any, http: Any) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-9", messages=MESSAGES)
    assert info.value.code == "model_not_found"
    r = http.get("/v1/models/gpt-9")
    assert r.status_code == 404
    openapi.validate(r.json(), "ErrorResponse")


def test_auth_is_required_on_v1(server: Any, openapi: Any) -> None:
    import httpx

    r = httpx.post(server.v1 + "/chat/completions", json={"model": "x", "messages": MESSAGES})
    assert r.status_code == 401
    openapi.validate(r.json(), "ErrorResponse")
    assert r.json()["error"]["code"] == "invalid_api_key"
    bad = openai.OpenAI(base_url=server.v1, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    assert httpx.get(server.base_url + "/health").status_code == 200  # health stays open


def test_body_too_large_is_413(http: Any, openapi: Any, model_id: str) -> None:
    r = http.post("/v1/chat/completions", json={"model": model_id, "messages": [{"role": "user", "content": "x" * 5_000_000}]})
    assert r.status_code == 413
    openapi.validate(r.json(), "ErrorResponse")
