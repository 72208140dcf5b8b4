"""Output regions: which part of a structured answer a token falls in, for acceptance
statistics (where drafts are won and lost), never for decoding.

`RegionScanner(kind)` reads an answer's text incrementally (`feed`) and names the region of
the next token (`region_of(token_text)`) without consuming it:
- JSON (`kind="json"`: JSON Schema, JSON mode, tool calls): `key` (inside an object key),
  `string` (inside a string value), `number`, `structure` (punctuation, whitespace, true /
  false / null, and what follows a closed value: the stop token), `text` (before any JSON
  value, e.g. a tool call's free text);
- SQL (`kind="sql"`): `literal` (a quoted string or a number), `identifier` (a quoted name,
  or a word that is no keyword prefix), `keyword`, `structure` (punctuation, whitespace);
- anything else (`kind="text"`): `text`.
A token belongs to the region its first non-space character starts in (a token spanning two
regions is counted once, where it starts). The decoder adds two sources that override these:
`forced` for drafts the grammar placed (no drafter's choice) and `history` for drafts taken
from earlier outputs.
Pure and heuristic (a lexer's state, no parser): knows nothing of grammars, tokens or
models; the counts it feeds are statistics, and nothing depends on them.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

RegionKind = Literal["json", "sql", "text"]
REGIONS = ("forced", "history", "key", "string", "number", "structure", "identifier", "keyword", "literal", "text")

SQL_KEYWORDS = frozenset("""
    select from where group by order having limit offset join inner left right outer full cross natural on
    using as and or not in is null like glob between exists case when then else end distinct all union
    intersect except asc desc cast collate escape with recursive over partition window filter rows range
    """.split())
_SQL_KEYWORD_PREFIXES = frozenset(word[:i] for word in SQL_KEYWORDS for i in range(1, len(word) + 1))


def region_kind(family: str) -> RegionKind:
    """The scanner for a grammar family (`CompiledGrammar.family`; "" for no grammar)."""
    if family.startswith(("json", "tools")):
        return "json"
    if family.startswith("sql"):
        return "sql"
    return "text"


@dataclasses.dataclass
class RegionScanner:
    kind: RegionKind
    stack: list[str] = dataclasses.field(default_factory=list)  # JSON: open "{" / "["
    quote: str = ""          # the open quote ("" outside a quoted run)
    key: bool = False        # JSON: the open string is an object key
    expect_key: bool = False  # JSON: inside an object where a key comes next
    word: str = ""           # the word (letters, digits, _) being read
    escape: bool = False     # JSON: a backslash was read inside a string
    opened: bool = False     # JSON: a value has started (what follows the last one closing is its end)

    def copy(self) -> RegionScanner:
        return dataclasses.replace(self, stack=list(self.stack))

    def region_of(self, token_text: str) -> str:
        """The region `token_text` would start in (state unchanged)."""
        if self.kind == "text":
            return "text"
        if self.quote:
            if self.kind == "json":
                return "key" if self.key else "string"
            return "literal" if self.quote == "'" else "identifier"
        stripped = token_text.lstrip()
        if not stripped:
            return "structure"
        first = stripped[0]
        if self.kind == "json":
            if not self.stack and first != "{" and first != "[":
                return "structure" if self.opened else "text"
            if first == '"':
                return "key" if self.expect_key else "string"
            if first.isdigit() or first == "-" or (self.word[:1].isdigit() and stripped[:1] in ".eE+"):
                return "number"
            return "structure"
        if first == "'":
            return "literal"
        if first in '"`[':
            return "identifier"
        if first.isalnum() or first == "_":
            continuing = token_text[:1].isalnum() or token_text[:1] == "_"
            word = (self.word if continuing else "") + _word_head(stripped)
            if word[:1].isdigit():
                return "literal"
            return "keyword" if word.lower() in _SQL_KEYWORD_PREFIXES else "identifier"
        return "structure"

    def feed(self, text: str) -> None:
        for char in text:
            self._feed_char(char)

    def _feed_char(self, char: str) -> None:
        if self.kind == "text":
            return
        if self.quote:
            if self.escape:
                self.escape = False  # the escaped character
            elif self.kind == "json" and char == "\\":
                self.escape = True
            elif char == self._closer():
                self.quote, self.key = "", False
            return
        if char.isalnum() or char == "_" or (self.kind == "json" and self.word and char in ".eE+-"):
            self.word += char
            return
        self.word = ""
        if self.kind == "json":
            if char == '"':
                self.quote, self.key = '"', self.expect_key
                self.expect_key = False
            elif char in "{[":
                self.stack.append(char)
                self.opened = True
                self.expect_key = char == "{"
            elif char in "}]":
                if self.stack:
                    self.stack.pop()
                self.expect_key = False
            elif char == ",":
                self.expect_key = bool(self.stack) and self.stack[-1] == "{"
        elif char in "'\"`[":
            self.quote = char

    def _closer(self) -> str:
        return "]" if self.quote == "[" else self.quote


def _word_head(text: str) -> str:
    head = ""
    for char in text:
        if not (char.isalnum() or char == "_"):
            break
        head += char
    return head
