"""Grammar text front end: GBNF / Lark dialect fixes before xgrammar parses the text.

Contract:
- `normalize_ebnf(text)` rewrites the GBNF (llama.cpp) spellings xgrammar's EBNF parser
  does not take into equivalent xgrammar EBNF: an empty alternative (`ws ::= | " "`,
  `( | "a")`, a trailing `|`) becomes `""`. Everything else (comments, strings, character
  classes, `{m,n}` repetition) is passed through unchanged; text xgrammar already reads
  comes back identical.
- `normalize_lark(text)` drops rule and terminal priorities (`name.2:`, `TERM.-1:`):
  xgrammar's Lark front end refuses them, and for a recognizer they change no accepted
  string (they only rank parses / lexer matches of the same text).
- Both are pure text functions; they never raise: what they cannot read is left for
  xgrammar, whose error then reaches the caller as a GrammarError.

Knows nothing of tokenizers, backends or specs.
"""

from __future__ import annotations

import re

_RULE_START = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\s*::=")
_OPENERS = ("::=", "|", "(")
_PRIORITY = re.compile(r"^(\s*[?!]?[A-Za-z_][A-Za-z0-9_]*)\.-?\d+(\s*:)", re.MULTILINE)


def normalize_lark(text: str) -> str:
    """Lark text without rule/terminal priorities (`rule.2:` -> `rule:`)."""
    return _PRIORITY.sub(r"\1\2", text)


def normalize_ebnf(text: str) -> str:
    """GBNF / xgrammar EBNF text with every empty alternative spelled `""`."""
    out: list[str] = []
    last = ""  # the last significant token: "::=", "|", "(", ")" or "x" (anything else)
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch in " \t\r\n":
            end = pos + 1
            while end < len(text) and text[end] in " \t\r\n":
                end += 1
            out.append(text[pos:end])
            pos = end
            continue
        if ch == "#":
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end
            out.append(text[pos:end])
            pos = end
            continue
        if last in ("::=", "|") and _RULE_START.match(text, pos):
            _insert_empty(out)  # `a ::= "x" |` then the next rule: empty last alternative
        if text.startswith("::=", pos):
            token, end = "::=", pos + 3
        elif ch in "|()":
            token, end = ch, pos + 1
            if ch in "|)" and last in _OPENERS:
                _insert_empty(out)
        elif ch in "\"[":
            end = _skip_quoted(text, pos, "\"" if ch == "\"" else "]")
            token = "x"
        else:
            end = pos + 1
            token = "x"
        out.append(text[pos:end])
        last = token if token != "x" else "x"
        pos = end
    if last in ("::=", "|"):
        _insert_empty(out)
    return "".join(out)


def _insert_empty(out: list[str]) -> None:
    """Put `""` right after the last significant piece (before trailing whitespace)."""
    index = len(out)
    while index > 0 and (not out[index - 1].strip() or out[index - 1].lstrip().startswith("#")):
        index -= 1
    out.insert(index, ' ""')


def _skip_quoted(text: str, pos: int, close: str) -> int:
    """End index (exclusive) of the string / class literal opening at `pos`."""
    end = pos + 1
    while end < len(text):
        if text[end] == "\\":
            end += 2
            continue
        if text[end] == close:
            return end + 1
        if text[end] == "\n":
            return end  # unterminated: let xgrammar report it
        end += 1
    return end
