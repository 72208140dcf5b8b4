"""GrammarSpec: a canonical, hashable description of one output constraint.

A spec is what the compile cache keys on (together with the tokenizer fingerprint and the
compiler's options), so two requests that ask for the same constraint must produce equal
specs: sources are canonical text (JSON re-serialised compactly, key order preserved because
JSON-schema property order is the order the model must emit), options are a sorted tuple.

Kinds and their `source`:
- "json_object": "" (any JSON object);
- "json_schema": the schema as compact JSON; option `strict` (bool);
- "regex": the pattern;  "choice": a JSON list of the allowed strings;
- "ebnf": GBNF/xgrammar EBNF text (root rule `root`);  "lark": Lark text (rule `start`);
- "tools": compact JSON `{"mode", "parallel", "tools": [{"name", "parameters", "strict"}]}`
  (see `grammars.tools`);
- "sql": compact JSON `{"dialect", "schema": null | {"tables": {name: [columns]}}}` (see
  `grammars.sql.grammar`).

Knows nothing of tokenizers or backends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

KINDS = ("json_object", "json_schema", "regex", "choice", "ebnf", "lark", "tools", "sql")

OptionValue = str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class GrammarSpec:
    """One constraint: `kind` (one of KINDS), canonical `source`, sorted `options`."""

    kind: str
    source: str
    options: tuple[tuple[str, OptionValue], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown grammar kind {self.kind!r}; expected one of {KINDS}")
        if list(self.options) != sorted(self.options):
            object.__setattr__(self, "options", tuple(sorted(self.options)))

    def option(self, name: str, default: OptionValue = None) -> OptionValue:
        for key, value in self.options:
            if key == name:
                return value
        return default

    @property
    def source_json(self) -> Any:
        """The source parsed as JSON (kinds json_schema, choice, tools, sql)."""
        return json.loads(self.source)


def canonical_json(value: Any) -> str:
    """Compact JSON, key order preserved (property order is meaningful in schemas)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
