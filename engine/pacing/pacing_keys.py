"""PacingKeys: what the engine's learned pacing of one request is keyed by.

The engine learns two things across requests that decide how a request is paced: how long
outputs run (`engine.pacing.output_lengths`: whether the draft's prompt prefill will pay) and how
well the draft model agrees with the target (`engine.pacing.acceptance_model.AcceptancePriors`).
Both must generalize to a grammar never seen before: a Text2SQL service sees a new schema
on most requests, and every schema compiles to a new grammar. So the keys go from the exact
grammar to what generalizes:
- `lengths`: ("spec", hash of the exact grammar spec), then ("family", the grammar's
  `pacing_family`: "sql_schema:sqlite", "tools:required", "json_schema"), then ("kind", the
  spec's kind); without a grammar ("kind", "text") alone. The output-length record lets the
  first of these that holds records decide, so a new schema of a known family is paced by its
  family's record from its first step, and by its own once it has one.
- `family`: the key of the engine-wide acceptance per drafter kind and family.
- `levels`: the name of each `lengths` key ("exact", "family", "kind"), for statistics.
Invariants: keys hold no schema text (a hash, a family name); a family key is never a
schema's hash. Knows nothing about records, costs or models.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grammars import CompiledGrammar


@dataclass(frozen=True)
class PacingKeys:
    lengths: tuple[Hashable, ...]
    levels: tuple[str, ...]
    family: str

    def level(self, key: Hashable | None) -> str:
        """The level name of one of `lengths` ("" for None or a key not among them)."""
        return self.levels[self.lengths.index(key)] if key in self.lengths else ""


def pacing_keys(grammar: CompiledGrammar | None) -> PacingKeys:
    """The pacing keys of a request constrained by `grammar` (None: unconstrained text)."""
    if grammar is None:
        return PacingKeys(lengths=(("kind", "text"),), levels=("kind",), family="text")
    family = grammar.pacing_family
    lengths: list[Hashable] = [("spec", hash(grammar.spec))]
    levels = ["exact"]
    if family != grammar.spec.kind:
        lengths.append(("family", family))
        levels.append("family")
    lengths.append(("kind", grammar.spec.kind))
    levels.append("kind")
    return PacingKeys(lengths=tuple(lengths), levels=tuple(levels), family=family)
