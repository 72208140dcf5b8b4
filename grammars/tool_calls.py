"""Tool calls in model text: the forms a call may take, and the scanner that finds them.

The forms (the ones the models we ship write; `docs/tools.md` has the measurements):

- tagged, as the Qwen2.5 / Hermes chat templates teach it:
  `<tool_call>\\n{"name": "get_weather", "arguments": {...}}\\n</tool_call>`;
- bare: a JSON object that opens with one of `BARE_OPENINGS` followed by a listed tool's
  name, e.g. `{"name": "get_weather", "arguments": {...}}`, pretty-printed or compact;
- either of those inside a Markdown fence (```` ```json ... ``` ````), and bare calls as
  the items of a JSON list (parallel calls: `[{...}, {...}]`).

The grammar (`grammars.tools.structural_tag`) switches on at exactly these openings, so every
call this scanner returns had its arguments constrained by the tool's schema from the call's
first token; text that does not open a call this way stays text (a `{"name": "John"}` in a
reply names no tool and is content).

`ToolCallScanner(names)` reads text incrementally: `feed(text)` and `finish()` return
`Segment`s in order, content or call. Content is released as soon as it cannot be the start
of a call (a possible partial opening — a fence, a `[`, a `<tool_call>` tag or the start of
`{"name": "` — is held back until it is decided); a call is released when its JSON object is
complete. The glue around calls (the fence, the list brackets and commas, the closing tag,
whitespace) is not content. Feeding the same text in any chunking yields the same segments
(up to how content is split), so a reassembled stream equals the non-streamed answer.
`parse_tool_calls(text, names)` is the one-shot form: `(content or None, calls)`.

Knows nothing of grammars' compilation, tokenizers, HTTP or streaming protocols.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import regex

CALL_BEGIN = "<tool_call>"
CALL_END = "</tool_call>"
# How a bare call object opens, up to the opening quote of the tool's name: compact, one line
# with spaces, and pretty-printed at the top level or as a list item (2 or 4 spaces).
BARE_OPENINGS = ('{"name": "', '{"name":"', '{\n  "name": "', '{\n    "name": "')
_WS = "[ \\t\\n]"
_GLUE_TOKENS = (CALL_END, ",", "]", "```")  # what may follow a call without being content


@dataclass(frozen=True, slots=True)
class ParsedToolCall:
    name: str
    arguments: str  # a JSON object, serialised


@dataclass(frozen=True, slots=True)
class Segment:
    """One piece of scanned text: `content` (call is None) or a tool call."""

    content: str = ""
    call: ParsedToolCall | None = None


def _alternation(strings: Iterable[str]) -> str:
    return "|".join(regex.escape(s) for s in sorted(set(strings), key=len, reverse=True))


class ToolCallScanner:
    """Incremental splitter of model text into content and tool calls (module docstring).

    `names` are the tools a bare call may name (a tagged call may name any function: the
    template teaches that form, and the grammar constrains its name where it applies)."""

    def __init__(self, names: Iterable[str]) -> None:
        name_alt = _alternation(names) or "(?!)"
        lead = f"(?:```(?:json)?[ \\t]*\\n{_WS}*)?(?:\\[{_WS}*)?"
        tagged = f"{regex.escape(CALL_BEGIN)}{_WS}*(?=\\{{)"
        bare = f"(?=(?:{_alternation(BARE_OPENINGS)})(?:{name_alt})\")"
        self._open = regex.compile(f"{lead}(?:{tagged}|{bare})")
        self._open_partial = regex.compile(
            f"{lead}(?:{tagged}|(?:{_alternation(BARE_OPENINGS)})(?:{name_alt})\")")
        self._after = regex.compile(
            f"{_WS}*(?:{regex.escape(CALL_END)})?(?:{_WS}*,)?(?:{_WS}*\\])?(?:{_WS}*```)?{_WS}*")
        self._buf = ""
        self._pos = 0  # text before this offset has been released
        self._obj = -1  # offset of the open call object's "{", or -1 outside a call
        self._decoder = json.JSONDecoder()

    def feed(self, text: str) -> list[Segment]:
        self._buf += text
        return self._scan(final=False)

    def finish(self) -> list[Segment]:
        return self._scan(final=True)

    # internals ----------------------------------------------------------------------------
    def _scan(self, *, final: bool) -> list[Segment]:
        out: list[Segment] = []
        while True:
            if self._obj >= 0:
                if not self._close_call(out, final=final):
                    break
                continue
            match = self._find_opening(self._pos)
            if match is None:
                hold = len(self._buf) if final else self._hold_from(self._pos)
                self._content(out, self._buf[self._pos : hold])
                self._pos = hold
                break
            self._content(out, self._buf[self._pos : match.start()])
            self._pos = match.start()
            self._obj = match.end()
        if final:
            self._buf, self._pos = self._buf[self._pos :], 0
            if self._buf:
                out.append(Segment(content=self._buf))
                self._buf = ""
        return out

    def _find_opening(self, start: int) -> regex.Match[str] | None:
        return self._open.search(self._buf, start)

    def _hold_from(self, start: int) -> int:
        """The first offset from which the rest of the buffer may still open a call."""
        for pos in range(start, len(self._buf)):
            if self._buf[pos] in "`[<{" and self._open_partial.match(self._buf, pos, partial=True):
                return pos
        return len(self._buf)

    def _close_call(self, out: list[Segment], *, final: bool) -> bool:
        """Release the open call if its object is complete; False when more text is needed."""
        try:
            obj, end = self._decoder.raw_decode(self._buf, self._obj)
        except json.JSONDecodeError:
            if not final:
                return False
            obj, end = None, len(self._buf)
        call = _as_call(obj)
        if call is None:  # not a call after all: the text is content
            stop = end if obj is not None else len(self._buf)
            self._content(out, self._buf[self._pos : stop])
            self._pos, self._obj = stop, -1
            return True
        after = self._after.match(self._buf, end)
        glue_end = after.end() if after is not None else end
        rest = self._buf[glue_end:]
        if not final and any(token.startswith(rest) for token in _GLUE_TOKENS):
            return False  # the glue after the call may still grow
        self._pos = glue_end
        self._obj = -1
        out.append(Segment(call=call))
        return True

    def _content(self, out: list[Segment], text: str) -> None:
        if text:
            out.append(Segment(content=text))


def _as_call(obj: object) -> ParsedToolCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):  # some models emit the arguments pre-serialised
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict) or set(obj) - {"name", "arguments", "parameters"}:
        return None
    return ParsedToolCall(obj["name"], json.dumps(arguments, ensure_ascii=False))


def parse_tool_calls(text: str, names: Iterable[str] = ()) -> tuple[str | None, list[ParsedToolCall]]:
    """Split model output into (content or None, tool calls), as `ToolCallScanner` does."""
    scanner = ToolCallScanner(names)
    segments = scanner.feed(text) + scanner.finish()
    calls = [s.call for s in segments if s.call is not None]
    content = "".join(s.content for s in segments)
    if calls:
        content = content.strip()
    return (content or None), calls
