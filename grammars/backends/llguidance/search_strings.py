"""Search patterns: a string schema's sliceable twin, so llguidance masks inside it cheaply.

A JSON Schema `pattern` is a search: `{"type": "string", "pattern": "\\d{4}-\\d{2}"}` admits
any string that *contains* a match, so llguidance's lexeme for it is `"` C* P C* `"` (C: a
string character). After one digit is written its lexer state is a union
(`C* P C* " | \\d{3}-\\d{2} C* "`), and llguidance's slicer, which adds whole precomputed
token sets when the state is a `C*`-headed repeat, gives up: every fill inside such a string
walks the whole token trie (~2 ms on Qwen's 151k tokens: the tail of JSON mask fill times).

`sliceable_twin(schema)` returns a second string schema whose language is a subset of
`schema`'s: strings that start with plain characters (`[^"\\\\\\x00-\\x1F\\x7F]*`, llguidance's
JSON slice class), then a `"` character, then anything, then a match of P. Written as
another alternative (another lexeme) beside the original, it changes no language, and its
lexer state stays `C* \\" …` while plain characters are written (a `C*`-headed repeat: no
plain character can start the escaped quote), so the slicer applies to the pair. The twin
is used by grammars.backends.llguidance.object_rules as `%json {schema} | %json {twin}`.

None (no twin) unless the twin is both exact and useful:
- the schema says only `type` (a string) and `pattern` (with `minLength` / `maxLength` or
  `format` llguidance intersects lexemes, which defeats the slicer anyway);
- the pattern has no `^` anywhere (outside character classes and escapes): anchored at the
  start, llguidance's lexeme already narrows to P's own characters;
- a `$` only as its last character: the twin then ends with `(?:P)$`, a subset of what
  either reading of a trailing `$` admits.

Knows nothing of lark, tokenizers or matchers; it reads one pattern's syntax, not its
meaning.
"""

from __future__ import annotations

from typing import Any

PLAIN = r'[^"\\\x00-\x1F\x7F]'  # llguidance's JSON slice class: characters written as is


def _top_level(pattern: str) -> list[str]:
    """The pattern's characters outside escapes and character classes, in order."""
    out: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if char == "[":
            index += 1
            if pattern[index:index + 1] == "^":
                index += 1
            if pattern[index:index + 1] == "]":  # a leading `]` is a member
                index += 1
            while index < len(pattern) and pattern[index] != "]":
                index += 2 if pattern[index] == "\\" else 1
            index += 1
            continue
        out.append(char)
        index += 1
    return out


def sliceable_twin(schema: Any) -> dict[str, Any] | None:
    """The twin string schema of `schema` (module docstring), or None."""
    if not isinstance(schema, dict) or set(schema) - {"type", "pattern"}:
        return None
    kind = schema.get("type", "string")
    if not (kind == "string" or (isinstance(kind, list) and "string" in kind)):
        return None
    pattern = schema.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        return None
    top = _top_level(pattern)
    end = "$" if top[-1:] == ["$"] and pattern.endswith("$") else ""
    if "^" in top or "$" in (top[:-1] if end else top):
        return None
    body = pattern[:-1] if end else pattern
    return {"type": "string", "pattern": f'^{PLAIN}*"[\\s\\S]*(?:{body}){end}'}
