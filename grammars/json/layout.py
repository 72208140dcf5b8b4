"""JSON whitespace layout: where constrained JSON may put whitespace between its tokens.

Two layouts, a compiler option (`GrammarCompiler(json_whitespace=)`, part of the cache key):
- "conventional" (the default): whitespace after `{`, `[`, `,` and `:` and before `}` and
  `]`, never before `,` or `:`. Compact JSON (`{"a":1,"b":[1,2]}`), one-line JSON
  (`{"a": 1, "b": [1, 2]}`, Python's `json.dumps`) and newline-and-indent JSON (what the
  models we ship write unconstrained, `json.dumps(indent=2)`) are all in it; a leading comma
  (`"Paris"\\n  ,\\n  "country"`) or a space before a colon is not. Under a schema that forbids
  closing the object where the model wants to, the flexible layout lets the model's newline
  through and then forces a comma after it; here the newline is not offered, so the model
  writes the comma itself.
- "flexible": whitespace between every pair of JSON tokens (the layout before there was a
  choice; vLLM's and xgrammar's `any_whitespace`).
Either way every whitespace run is bounded by the compiler's `max_whitespace` (vLLM #38696),
and the layouts accept the same JSON values: only the whitespace between tokens differs.

How each backend writes "conventional":
- xgrammar: `conventional_ebnf` drops the whitespace repetitions xgrammar's JSON-schema
  converter writes right before `","` and `":"` from its EBNF; the result is compiled as a
  grammar (`json_schema`, `json_object`, and each tool's arguments inside the tools
  structural tag, there as a `grammar` content).
- llguidance: its JSON compiler's whitespace is a lexer-level skip between any two lexemes
  (`whitespace_flexible` / `whitespace_pattern`), and its separators are literal strings, so
  it can say only "flexible" or one exact layout (`item_separator: ", "` etc.), not this
  one. Objects, arrays, unions of them and free-form values are written as lark rules with
  explicit whitespace instead (grammars.backends.llguidance.object_rules, `whitespace="conventional"`);
  scalar leaves are single lexemes (no whitespace inside). What those rules do not read (an
  object with `minProperties`, a `const` object…) stays a JSON-compiler leaf with flexible
  whitespace: wider, never narrower.
- outlines: always flexible.

Knows nothing of tokenizers, matchers, caching or HTTP.
"""

from __future__ import annotations

import re
from typing import Literal

JsonWhitespace = Literal["conventional", "flexible"]
JSON_WHITESPACES: tuple[JsonWhitespace, ...] = ("conventional", "flexible")
DEFAULT_JSON_WHITESPACE: JsonWhitespace = "conventional"

# xgrammar writes a gap as `whitespace_N{0, n}` (one rule per gap, `[ \n\r\t]`) before every
# JSON separator; string literals are quoted (`"\",\""`), so this never matches inside one
_GAP_BEFORE_SEPARATOR = re.compile(r'\bwhitespace(?:_\d+)?\{0, ?\d+\} (?="[,:]")')


def check_json_whitespace(value: str) -> JsonWhitespace:
    """`value` when it names a layout; ValueError otherwise."""
    if value not in JSON_WHITESPACES:
        raise ValueError(f"json_whitespace must be one of {JSON_WHITESPACES}, not {value!r}")
    return value  # type: ignore[return-value]


def conventional_ebnf(ebnf: str) -> str:
    """xgrammar's JSON EBNF (any_whitespace, a `max_whitespace_cnt`) without whitespace
    before `,` and `:` (tests/grammars/test_json_layout.py fails should an xgrammar write
    its gaps differently)."""
    return _GAP_BEFORE_SEPARATOR.sub("", ebnf)
