"""ToolCallStream: model text → content + OpenAI tool-call deltas, identical whether the text
arrives at once or in arbitrary pieces (the streamed/non-streamed equality the API needs)."""

from __future__ import annotations

import itertools
import json

import pytest

from gateway.tool_stream import ToolCallStream

TWO_CALLS = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC", "fmt": "24h"}}\n</tool_call>'
)


def _ids() -> object:
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def _reassemble(pieces: list[str]) -> tuple[str, list[dict[str, str]], list[dict[str, object]]]:
    stream = ToolCallStream(id_factory=_ids())  # type: ignore[arg-type]
    content = ""
    deltas: list[dict[str, object]] = []
    for piece in pieces:
        ev = stream.feed(piece)
        content += ev.content
        deltas += ev.tool_call_deltas
    ev = stream.finish()
    content += ev.content
    deltas += ev.tool_call_deltas
    calls: dict[int, dict[str, str]] = {}
    for d in deltas:
        idx = int(d["index"])  # type: ignore[call-overload]
        fn = d["function"]
        assert isinstance(fn, dict)
        if idx not in calls:
            assert d["id"] and d["type"] == "function" and fn["name"], d  # header first
            calls[idx] = {"id": str(d["id"]), "name": fn["name"], "arguments": fn["arguments"]}
        else:
            assert set(d) == {"index", "function"} and set(fn) == {"arguments"}, d  # name only once
            calls[idx]["arguments"] += fn["arguments"]
    return content, [calls[i] for i in sorted(calls)], deltas


def _all_at_once(text: str) -> tuple[str | None, list[tuple[str, str]]]:
    stream = ToolCallStream(id_factory=_ids())  # type: ignore[arg-type]
    stream.feed(text)
    stream.finish()
    return stream.content, [(c.name, c.arguments) for c in stream.calls]


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 1000])
def test_two_parallel_calls_any_chunking(piece: int) -> None:
    pieces = [TWO_CALLS[i : i + piece] for i in range(0, len(TWO_CALLS), piece)]
    content, calls, deltas = _reassemble(pieces)
    assert content == ""
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"tz": "UTC", "fmt": "24h"}),
    ]
    assert _all_at_once(TWO_CALLS) == (None, [(c["name"], c["arguments"]) for c in calls])
    assert len(deltas) > 2  # arguments arrive in pieces, not one blob per call


@pytest.mark.parametrize("piece", [1, 4, 1000])
def test_content_then_call_and_held_partial_tag(piece: int) -> None:
    text = "Let me check.  \n" + TWO_CALLS.split("\n<tool_call>")[0]
    pieces = [text[i : i + piece] for i in range(0, len(text), piece)]
    content, calls, _ = _reassemble(pieces)
    assert content == "Let me check."
    assert [c["name"] for c in calls] == ["get_weather"]
    assert _all_at_once(text)[0] == "Let me check."


def test_plain_text_passes_through_exactly() -> None:
    text = "no calls here <tool but not a tag>  \n"
    for piece in (1, 3, 100):
        content, calls, _ = _reassemble([text[i : i + piece] for i in range(0, len(text), piece)])
        assert content == text and calls == []
    assert _all_at_once(text) == (text, [])


def test_unterminated_or_invalid_call_is_kept_as_content() -> None:
    cut = '<tool_call>\n{"name": "get_weather", "argum'
    assert _all_at_once(cut) == (cut, [])
    bad = "<tool_call>not json</tool_call>"
    assert _all_at_once(bad) == (bad, [])


@pytest.mark.parametrize("piece", [1, 3, 1000])
def test_fenced_bare_call_streams_as_a_call(piece: int) -> None:
    text = 'I will look it up.\n```json\n{\n  "name": "get_time",\n  "arguments": {"tz": "UTC"}\n}\n```\n'
    stream = ToolCallStream(["get_time"], id_factory=_ids())  # type: ignore[arg-type]
    content = ""
    deltas: list[dict[str, object]] = []
    for start in range(0, len(text), piece):
        events = stream.feed(text[start : start + piece])
        content, deltas = content + events.content, deltas + events.tool_call_deltas
    events = stream.finish()
    content, deltas = content + events.content, deltas + events.tool_call_deltas
    assert content == "I will look it up."
    assert [c.name for c in stream.calls] == ["get_time"] and stream.content == "I will look it up."
    assert "".join(str(d["function"]["arguments"]) for d in deltas) == '{"tz": "UTC"}'  # type: ignore[index]
