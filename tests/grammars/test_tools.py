"""Tool calling: spec from tools/tool_choice, the tool-call grammar, parse_tool_calls."""

from __future__ import annotations

import json

import pytest

from grammars import GrammarError, ParsedToolCall, parse_tool_calls, spec_from_request

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"},
                                         "days": {"type": "integer", "minimum": 1}},
        "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}},
]


def call(name: str, arguments: dict) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


WEATHER = call("get_weather", {"city": "Paris", "days": 2})
TIME = call("get_time", {"tz": "UTC"})


def accepts(compiler, body: dict, text: str) -> bool:  # type: ignore[no-untyped-def]
    matcher = compiler.compile(spec_from_request(body)).matcher()
    return matcher.accept_text(text) and matcher.can_stop()


def test_tool_choice_none_or_no_tools_is_unconstrained() -> None:
    assert spec_from_request({"tools": TOOLS, "tool_choice": "none"}) is None
    assert spec_from_request({"tool_choice": "none"}) is None
    assert spec_from_request({"tools": []}) is None


def test_unknown_named_tool_is_an_error() -> None:
    with pytest.raises(GrammarError, match="unknown function 'nope'") as info:
        spec_from_request({"tools": TOOLS, "tool_choice": {"type": "function",
                                                            "function": {"name": "nope"}}})
    assert info.value.param == "tool_choice"
    with pytest.raises(GrammarError) as info:
        spec_from_request({"tools": TOOLS, "tool_choice": "sometimes"})
    assert info.value.param == "tool_choice"


def test_strict_tool_parameters_are_checked() -> None:
    tools = [{"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}}}}]
    with pytest.raises(GrammarError, match="'uniqueItems' at /properties/x") as info:
        spec_from_request({"tools": tools, "tool_choice": "required"})
    assert info.value.param == "tools[0].function.parameters"


def test_required_allows_one_or_more_calls_only(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    body = {"tools": TOOLS, "tool_choice": "required"}
    assert accepts(xgr_compiler, body, WEATHER)
    assert accepts(xgr_compiler, body, WEATHER + "\n" + TIME)
    assert not accepts(xgr_compiler, body, "Sure, it is sunny.")
    assert not accepts(xgr_compiler, body, call("get_weather", {"days": 2}))  # required city
    assert not accepts(xgr_compiler, body, call("get_weather", {"city": "P", "days": 0}))
    assert not accepts(xgr_compiler, body, call("launch_rockets", {}))


def test_parallel_false_allows_exactly_one_call(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    body = {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False}
    assert accepts(xgr_compiler, body, TIME)
    assert not accepts(xgr_compiler, body, WEATHER + "\n" + TIME)
    matcher = xgr_compiler.compile(spec_from_request(body)).matcher()
    assert matcher.accept_text(TIME) and matcher.can_stop()
    assert not matcher.accept_text("\n")  # no separator towards a second call


def test_named_tool_choice_forces_that_function(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    body = {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_time"}}}
    assert accepts(xgr_compiler, body, TIME)
    assert not accepts(xgr_compiler, body, WEATHER)
    assert not accepts(xgr_compiler, body, TIME + "\n" + TIME)
    matcher = xgr_compiler.compile(spec_from_request(body)).matcher()
    assert matcher.jump_forward_text().startswith('<tool_call>\n{"name": "get_time"')


def test_auto_allows_text_or_calls(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    body = {"tools": TOOLS, "tool_choice": "auto"}
    assert accepts(xgr_compiler, body, "It is sunny in Paris.")
    assert accepts(xgr_compiler, body, WEATHER)
    assert accepts(xgr_compiler, body, WEATHER + "\n" + TIME)
    assert not accepts(xgr_compiler, body, "Let me check. <tool_call>")
    assert not accepts(xgr_compiler, body, call("get_weather", {"town": "x"}))
    assert accepts(xgr_compiler, {"tools": TOOLS}, "plain answer")  # auto is the default


def test_tool_call_special_token_is_allowed_first(xgr_compiler, qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    import torch

    matcher = xgr_compiler.compile(spec_from_request(
        {"tools": TOOLS, "tool_choice": "required"})).matcher()
    bitmask = xgr_compiler.allocate_bitmask(1)
    matcher.fill_mask(bitmask, 0)
    tool_call_id = qwen_tokenizer.convert_tokens_to_ids("<tool_call>")
    word, bit = divmod(tool_call_id, 32)
    assert (int(bitmask[0, word]) >> bit) & 1
    assert matcher.accept_token(tool_call_id)
    assert torch.is_tensor(bitmask)


def test_parse_tool_calls() -> None:
    content, calls = parse_tool_calls(WEATHER + "\n" + TIME)
    assert content is None
    assert calls == [ParsedToolCall("get_weather", json.dumps({"city": "Paris", "days": 2})),
                     ParsedToolCall("get_time", json.dumps({"tz": "UTC"}))]
    assert parse_tool_calls("just text") == ("just text", [])
    content, calls = parse_tool_calls("Checking.\n" + TIME)
    assert content == "Checking." and [c.name for c in calls] == ["get_time"]
    broken = "<tool_call>\n{not json}\n</tool_call>"
    assert parse_tool_calls(broken) == (broken, [])
    truncated = '<tool_call>\n{"name": "get_time", "argu'
    assert parse_tool_calls(truncated) == (truncated, [])
    _, calls = parse_tool_calls('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>')
    assert calls == [ParsedToolCall("f", '{"a": 1}')]


@pytest.mark.parametrize(("parameters", "reason"), [
    ({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}, "missing"),
    ({"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}}, "remote"),
    ({"type": "object", "properties": {"x": {"type": "string", "pattern": "(?<=a)b"}}}, "Lookbehind"),
    ({"type": "object", "properties": {"x": {"type": "integer", "minimum": 5, "maximum": 1}}}, "minimum"),
    ({"type": "object", "properties": {"x": {"type": "frobnicate"}}}, "frobnicate"),
])
def test_a_tool_whose_schema_cannot_be_enforced_is_named(xgr_compiler, parameters: dict, reason: str) -> None:  # type: ignore[no-untyped-def]
    bad = {"type": "function", "function": {"name": "bad", "parameters": parameters}}
    for choice in ("auto", "required"):
        with pytest.raises(GrammarError, match=reason) as info:
            xgr_compiler.compile(spec_from_request({"tools": [*TOOLS, bad], "tool_choice": choice}))
        assert info.value.param == "tools[2].function.parameters"
        assert "'bad'" in info.value.message


def test_tool_parameters_read_as_json_schema_responses_are(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    """A free-form `{"type": "object"}` argument is any object (grammars.json.policy rule 1's
    exception), as it is under response_format json_schema, not only `{}`."""
    tool = {"type": "function", "function": {"name": "configure", "parameters": {
        "type": "object", "properties": {"options": {"type": "object"}}, "required": ["options"]}}}
    body = {"tools": [tool], "tool_choice": "required"}
    assert accepts(xgr_compiler, body, call("configure", {"options": {"depth": 2, "fast": True}}))
