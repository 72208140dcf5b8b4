"""Multi-turn tool conversations: the gateway renders assistant `tool_calls` and `tool` results
through the model's chat template exactly as transformers renders the conversation written
in the template's own format (arguments as objects), token for token, on the real Qwen2.5
tokenizer; and an assistant tool call whose `arguments` is not a JSON object is a 400 naming
`messages[i].tool_calls[j].function.arguments`, never a 500. The rendering needs no model;
the 400s go through the real server (tiny models)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.prompts import encode_text, render_chat
from gateway.protocol.chat import ChatCompletionRequest

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string",
                                                                                        "enum": ["c", "f"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Local time",
                                         "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}
PARIS_ARGS = {"city": "Paris", "unit": "c"}
TOKYO_ARGS = {"city": "Tōkyō", "n": 1.5, "nested": {"a": [1, None, True]}}  # non-ASCII, numbers, nesting


def _openai_conversation() -> list[dict[str, Any]]:
    """A 3-turn conversation as an OpenAI client sends it (arguments are JSON strings)."""
    return [
        {"role": "developer", "content": "Answer briefly."},
        {"role": "user", "content": "Weather in Paris and Tokyo, and the time there?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(PARIS_ARGS)}},
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(TOKYO_ARGS)}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "9 degrees, rain"}]},
        {"role": "assistant", "content": "Paris: 18 °C and sunny. Tokyo: 9 °C and rain."},
        {"role": "user", "content": "And the time in Tokyo?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_3", "type": "function", "function": {"name": "get_time", "arguments": '{"tz": "Asia/Tokyo"}'}}]},
        {"role": "tool", "tool_call_id": "call_3", "content": "21:04"},
    ]


def _template_conversation() -> list[dict[str, Any]]:
    """The same conversation written in the template's own format (what it was trained on)."""
    return [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Weather in Paris and Tokyo, and the time there?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": PARIS_ARGS}},
            {"type": "function", "function": {"name": "get_weather", "arguments": TOKYO_ARGS}},
        ]},
        {"role": "tool", "content": "18 degrees, sunny"},
        {"role": "tool", "content": "9 degrees, rain"},
        {"role": "assistant", "content": "Paris: 18 °C and sunny. Tokyo: 9 °C and rain."},
        {"role": "user", "content": "And the time in Tokyo?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"type": "function", "function": {"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}}]},
        {"role": "tool", "content": "21:04"},
    ]


def _gateway_ids(tokenizer: Any, body: dict[str, Any]) -> list[int]:
    request = ChatCompletionRequest.model_validate({"model": "m", **body})
    assert request.unsupported_fields() == []
    return encode_text(tokenizer, render_chat(tokenizer, request.template_messages(), request.tool_dicts()))


@pytest.mark.parametrize("upto", [5, 7, 9])  # after turn 1's results, after the follow-up question, all
def test_rendering_matches_the_template_token_for_token(qwen_tokenizer: Any, upto: int) -> None:
    ids = _gateway_ids(qwen_tokenizer, {"messages": _openai_conversation()[:upto], "tools": [WEATHER, TIME]})
    expected = qwen_tokenizer.apply_chat_template(_template_conversation()[:upto], tools=[WEATHER, TIME],
                                                  add_generation_prompt=True, tokenize=True, return_dict=False)
    assert ids == list(expected)
    text = qwen_tokenizer.decode(ids)
    history = text[text.index("<|im_start|>user"):]
    assert history.count("<tool_call>") == (2 if upto < 9 else 3)
    assert '"arguments": {"city": "Paris", "unit": "c"}' in history  # the object, not a quoted string
    assert text.endswith("<|im_start|>assistant\n")


def test_consecutive_tool_results_share_one_user_turn(qwen_tokenizer: Any) -> None:
    ids = _gateway_ids(qwen_tokenizer, {"messages": _openai_conversation()[:5], "tools": [WEATHER, TIME]})
    text = qwen_tokenizer.decode(ids)
    results = text[text.rindex("<|im_start|>user"):]
    assert results.count("<tool_response>") == 2 and "9 degrees, rain" in results


def _post(http: Any, model_id: str, arguments: Any, *, index: int = 0) -> Any:
    calls = [{"id": f"call_{j}", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Paris"}' if j != index else arguments}}
             for j in range(index + 1)]
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": calls},
                *({"role": "tool", "tool_call_id": call["id"], "content": "18 degrees"} for call in calls)]
    return http.post("/v1/chat/completions", json={"model": model_id, "messages": messages, "tools": [WEATHER],
                                                   "max_tokens": 2})


@pytest.mark.parametrize("arguments", ['{"city": "Paris"', "Paris", "", "[1, 2]", "42", "null", '"{}"',
                                       {"city": "Paris"}, None])
def test_arguments_that_are_not_a_json_object_are_400_naming_the_field(
        http: Any, openapi: Any, model_id: str, arguments: Any) -> None:
    r = _post(http, model_id, arguments, index=1)
    assert r.status_code == 400, r.text
    openapi.validate(r.json(), "ErrorResponse")
    assert r.json()["error"]["param"] == "messages[1].tool_calls[1].function.arguments", r.json()


def test_a_conversation_with_tool_results_is_answered(http: Any, model_id: str) -> None:
    r = _post(http, model_id, '{"city": "Lyon", "unit": "c"}', index=1)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] > 60
