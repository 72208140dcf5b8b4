"""grammars.tool_calls: the call forms read back out of text, in any chunking, and the auto
grammar admitting exactly the forms the scanner reads (every call parsed is a call the
grammar constrained)."""

from __future__ import annotations

import json

import pytest

from grammars import ParsedToolCall, ToolCallScanner, parse_tool_calls, spec_from_request

NAMES = ["get_weather", "get_time"]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"},
                                         "days": {"type": "integer", "minimum": 1}},
        "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}},
]
WEATHER = ParsedToolCall("get_weather", json.dumps({"city": "Paris"}))
TIME = ParsedToolCall("get_time", json.dumps({"tz": "UTC"}))

# (text, content, calls): the forms models write, and texts that must stay text
CASES = [
    ('{"name": "get_weather", "arguments": {"city": "Paris"}}', None, [WEATHER]),
    ('{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}', None, [WEATHER]),
    ('Sure.\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```', "Sure.", [WEATHER]),
    ('```json\n[\n  {\n    "name": "get_weather",\n    "arguments": {"city": "Paris"}\n  },\n'
     '  {\n    "name": "get_time",\n    "arguments": {"tz": "UTC"}\n  }\n]\n```', None, [WEATHER, TIME]),
    ('[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
     '{"name":"get_time","arguments":{"tz":"UTC"}}]', None, [WEATHER, TIME]),
    ('<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>\n'
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', None, [TIME, WEATHER]),
    ('Checking. {"name": "get_time", "arguments": {"tz": "UTC"}} Done.', "Checking. Done.", [TIME]),
    # text: a JSON object naming no listed tool, code fences, lists, a truncated call
    ('Here: {"name": "John", "age": 3}', 'Here: {"name": "John", "age": 3}', []),
    ('```json\n{"city": "Paris"}\n```', '```json\n{"city": "Paris"}\n```', []),
    ("A list [1, 2] and ```python\nx = 1\n```", "A list [1, 2] and ```python\nx = 1\n```", []),
    ('{"name": "get_weather", "argu', '{"name": "get_weather", "argu', []),
    ('{"name": "get_weather", "arguments": {"city": "P"}, "id": 3}',
     '{"name": "get_weather", "arguments": {"city": "P"}, "id": 3}', []),
    ("<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", []),
]


@pytest.mark.parametrize(("text", "content", "calls"), CASES)
def test_forms_parse_the_same_in_any_chunking(text: str, content: str | None,
                                              calls: list[ParsedToolCall]) -> None:
    assert parse_tool_calls(text, NAMES) == (content, calls)
    for piece in (1, 2, 5):
        scanner = ToolCallScanner(NAMES)
        segments = []
        for start in range(0, len(text), piece):
            segments += scanner.feed(text[start : start + piece])
        segments += scanner.finish()
        assert [s.call for s in segments if s.call] == calls
        streamed = "".join(s.content for s in segments)
        assert ((streamed.strip() if calls else streamed) or None) == content


def test_a_possible_opening_is_held_and_plain_text_is_not() -> None:
    scanner = ToolCallScanner(NAMES)
    assert "".join(s.content for s in scanner.feed("Sure.\n```js")) == "Sure.\n"
    assert scanner.feed('on\n{"name": "get_') == []
    scanner = ToolCallScanner(NAMES)
    assert "".join(s.content for s in scanner.feed("no call here.")) == "no call here."


def test_unlisted_names_are_text_for_bare_calls_only() -> None:
    assert parse_tool_calls('{"name": "other", "arguments": {}}', NAMES)[1] == []
    tagged = '<tool_call>\n{"name": "other", "arguments": {}}\n</tool_call>'
    assert parse_tool_calls(tagged, NAMES)[1] == [ParsedToolCall("other", "{}")]


def _accepts(compiler, body: dict, text: str) -> bool:  # type: ignore[no-untyped-def]
    matcher = compiler.compile(spec_from_request(body)).matcher()
    return matcher.accept_text(text) and matcher.can_stop()


def test_auto_grammar_admits_every_form_and_enforces_arguments(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    body = {"tools": TOOLS}
    for text, _content, calls in CASES:
        if calls:
            assert _accepts(xgr_compiler, body, text), text
    for text in ('{"name": "get_weather", "arguments": {"town": "Paris"}}',
                 '```json\n{\n  "name": "get_weather",\n  "arguments": {"city": 3}\n}\n```',
                 '{"name":"get_time","arguments":{}}'):
        assert not _accepts(xgr_compiler, body, text), text
    assert _accepts(xgr_compiler, body, 'Here: {"name": "John", "age": 3}')  # not a listed tool


def test_auto_without_parallel_calls_ends_after_the_first(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    body = {"tools": TOOLS, "parallel_tool_calls": False}
    one = '{"name": "get_time", "arguments": {"tz": "UTC"}}'
    assert _accepts(xgr_compiler, body, one)
    assert not _accepts(xgr_compiler, body, one + "\n" + one)
    assert _accepts(xgr_compiler, body, "plain text, no call")
