"""Incremental splitter of model output into assistant content and OpenAI tool-call deltas.

The call forms and the scanning are `grammars.tool_calls` (tagged `<tool_call>` blocks, bare
JSON calls naming a listed tool, fenced or in a list). `ToolCallStream(names).feed(text)`
returns the OpenAI delta events as the text arrives; `finish()` flushes. The same object
serves the non-streamed response (`feed(all_text)` + `finish()`), so a reassembled stream
always equals the non-streamed message. Rules: content streams as it comes, except what may
still open a call (held by the scanner) and trailing whitespace, which are held; whitespace
between/around calls is dropped once a call exists; each call is emitted when its JSON object
is complete (the name once, with its id and `"type": "function"`, then the arguments in
pieces); an unterminated call at the end is returned as content. Knows nothing about HTTP or
engines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gateway.protocol.responses import tool_call_id
from grammars import ParsedToolCall, Segment, ToolCallScanner

ARGUMENT_PIECE_CHARS = 16


@dataclass
class ParsedCall:
    id: str
    name: str
    arguments: str


@dataclass
class ToolStreamEvents:
    """What one `feed`/`finish` produced: a content delta and tool-call delta dicts."""

    content: str = ""
    tool_call_deltas: list[dict[str, object]] = field(default_factory=list)


class ToolCallStream:
    def __init__(self, names: Iterable[str] = (), *,
                 id_factory: Callable[[], str] = tool_call_id) -> None:
        self._scanner = ToolCallScanner(names)
        self._held_ws = ""
        self._id_factory = id_factory
        self.calls: list[ParsedCall] = []
        self.content_parts: list[str] = []

    # public -------------------------------------------------------------------------------
    def feed(self, text: str) -> ToolStreamEvents:
        return self._events(self._scanner.feed(text))

    def finish(self) -> ToolStreamEvents:
        events = self._events(self._scanner.finish())
        if not self.calls and self._held_ws:
            events.content += self._held_ws
            self.content_parts.append(self._held_ws)
        self._held_ws = ""
        return events

    @property
    def content(self) -> str | None:
        text = "".join(self.content_parts)
        return text if (text or not self.calls) else None

    # internals ----------------------------------------------------------------------------
    def _events(self, segments: list[Segment]) -> ToolStreamEvents:
        events = ToolStreamEvents()
        for segment in segments:
            if segment.call is not None:
                self._emit_call(segment.call, events)
            else:
                self._emit_content(segment.content, events)
        return events

    def _emit_content(self, text: str, events: ToolStreamEvents) -> None:
        """Content up to its trailing whitespace; that is held until text follows it (a call
        drops it; the end keeps it only when there are no calls)."""
        text = self._held_ws + text
        self._held_ws = ""
        stripped = text.rstrip()
        tail = text[len(stripped) :]
        if stripped:
            events.content += stripped
            self.content_parts.append(stripped)
        self._held_ws = tail

    def _emit_call(self, call: ParsedToolCall, events: ToolStreamEvents) -> None:
        self._held_ws = ""  # whitespace right before a call is not content
        index = len(self.calls)
        new = ParsedCall(id=self._id_factory(), name=call.name, arguments=call.arguments)
        self.calls.append(new)
        events.tool_call_deltas.append(
            {"index": index, "id": new.id, "type": "function",
             "function": {"name": new.name, "arguments": ""}})
        args = new.arguments
        for start in range(0, len(args), ARGUMENT_PIECE_CHARS):
            events.tool_call_deltas.append(
                {"index": index, "function": {"arguments": args[start : start + ARGUMENT_PIECE_CHARS]}})
