"""Incremental splitter of model output into assistant content and tool calls.

The model writes tool calls in the Qwen2.5/Hermes syntax `<tool_call>{json}</tool_call>`
(owned by `grammars.tools`). `ToolCallStream.feed(text)` returns OpenAI delta events as the
text arrives; `finish()` flushes. The same object serves the non-streamed response
(`feed(all_text)` + `finish()`), so a reassembled stream always equals the non-streamed
message. Rules: content before a call streams as it comes, except a possible partial
`<tool_call>` tag and trailing whitespace, which are held; whitespace between/around calls
is dropped once a call exists; each call is emitted when its closing tag arrives (the name
once, with its id and `"type": "function"`, then the arguments in pieces); an unterminated
call at the end is parsed if possible, otherwise returned as content. Knows nothing about
HTTP or engines; call parsing is `grammars.tools.parse_tool_calls`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.protocol.responses import tool_call_id
from grammars.tools import parse_tool_calls

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
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


def _held_prefix_len(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class ToolCallStream:
    def __init__(self, *, id_factory: Callable[[], str] = tool_call_id) -> None:
        self._buf = ""
        self._in_call = False
        self._held_ws = ""
        self._id_factory = id_factory
        self.calls: list[ParsedCall] = []
        self.content_parts: list[str] = []

    # public -------------------------------------------------------------------------------
    def feed(self, text: str) -> ToolStreamEvents:
        self._buf += text
        events = ToolStreamEvents()
        while True:
            if self._in_call:
                end = self._buf.find(CLOSE_TAG)
                if end < 0:
                    break
                block = OPEN_TAG + self._buf[:end] + CLOSE_TAG
                self._buf = self._buf[end + len(CLOSE_TAG) :]
                self._in_call = False
                if not self._emit_calls(block, events):
                    self._emit_content(block, events)
            else:
                start = self._buf.find(OPEN_TAG)
                if start >= 0:
                    self._emit_content(self._buf[:start], events, before_call=True)
                    self._buf = self._buf[start + len(OPEN_TAG) :]
                    self._in_call = True
                    continue
                hold = _held_prefix_len(self._buf, OPEN_TAG)
                self._emit_content(self._buf[: len(self._buf) - hold], events)
                self._buf = self._buf[len(self._buf) - hold :]
                break
        return events

    def finish(self) -> ToolStreamEvents:
        events = ToolStreamEvents()
        if self._in_call:
            block = OPEN_TAG + self._buf
            self._in_call = False
            if not self._emit_calls(block, events):
                self._emit_content(block, events)
        elif self._buf:
            self._emit_content(self._buf, events)
        self._buf = ""
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
    def _emit_content(self, text: str, events: ToolStreamEvents, *, before_call: bool = False) -> None:
        text = self._held_ws + text
        self._held_ws = ""
        stripped = text.rstrip()
        tail = text[len(stripped) :]
        if self.calls and not stripped:  # whitespace between/after calls: dropped if nothing follows
            self._held_ws = "" if before_call else tail
            return
        if before_call:
            tail = ""  # whitespace right before a call is not content
        if stripped:
            events.content += stripped
            self.content_parts.append(stripped)
        self._held_ws = tail

    def _emit_calls(self, block: str, events: ToolStreamEvents) -> bool:
        _, parsed = parse_tool_calls(block)
        if not parsed:
            return False
        for call in parsed:
            index = len(self.calls)
            new = ParsedCall(id=self._id_factory(), name=call.name, arguments=call.arguments)
            self.calls.append(new)
            events.tool_call_deltas.append(
                {
                    "index": index,
                    "id": new.id,
                    "type": "function",
                    "function": {"name": new.name, "arguments": ""},
                }
            )
            args = new.arguments
            for start in range(0, len(args), ARGUMENT_PIECE_CHARS):
                events.tool_call_deltas.append(
                    {"index": index, "function": {"arguments": args[start : start + ARGUMENT_PIECE_CHARS]}}
                )
        return True
