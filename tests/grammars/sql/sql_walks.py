"""Random walks over a schema-aware SQL matcher's masks: the dead-end hunter for the property tests.

A walk starts at the empty text and, at every step, fills the matcher's mask and picks one
allowed token: mostly by *plans* (SQL text the walk spells out with allowed tokens, the
longest allowed token that is a prefix of what is left: first a random query over the
schema, with select-list aliases referenced later, literals holding `=`, quotes and `%`;
where the plan cannot go on, or at random, a snippet: a schema name, an alias, a keyword, a
function, a literal), else a random allowed token (short ASCII ones preferred, some holding
a quote, `=` or `%`). It records a
dead end (a mask that allows no token while the matcher cannot stop) and any token the mask
allowed that `accept_token` then refused. A walk may start from a given prefix (a state deep
in a loop: a FROM at its cap, a predicate written many times).

Knows nothing of pytest; test modules drive it.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from grammars.sql.grammar import FUNCTIONS
from tokenmask import unpack_bitmask

_KEYWORDS = ("SELECT ", "DISTINCT ", " FROM ", " WHERE ", " AND ", " OR ", " NOT ", " IN (", " LIKE ",
             " BETWEEN ", " IS NULL", " IS NOT NULL", " GROUP BY ", " HAVING ", " ORDER BY ", " DESC",
             " LIMIT 1", " JOIN ", " INNER JOIN ", " LEFT JOIN ", " ON ", " AS ", " UNION ",
             "(SELECT ", "CASE WHEN ", " THEN ", " ELSE ", " END", "CAST(", " AS REAL)", "EXISTS (",
             "(", ")", ", ", " = ", " * 100 / ", " || ", ";")
_LITERALS = ("'='", "' = '", "'c'", "'%a%'", "'%Y'", "'it''s'", '"="', "'''='''", "'=' ", "'%'",
             "'a=b'", "'\"'", '"%"', "'-'", "'+'")
_ALIASES = ("cnt", "percentage", "T1", "T2", "x", "total", "n", "avg_count")
_SPECIAL = re.compile(r"['\"=%]")


@dataclass
class WalkReport:
    walks: int = 0
    tokens: int = 0
    completed: int = 0
    dead_ends: list[str] = field(default_factory=list)  # texts whose mask allowed nothing
    refused: list[tuple[str, str]] = field(default_factory=list)  # (text, token) allowed yet refused


def _quote(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else '"' + name.replace('"', '""') + '"'


def plans_for(tables: dict[str, list[str]]) -> list[str]:
    """Snippets a walk spells out: the schema's names (bare and quoted), qualified columns,
    aliases, keywords, functions and literals."""
    names = [*tables, *(c for cols in tables.values() for c in cols)]
    plans = [*_KEYWORDS, *_LITERALS, *(f"{f.upper()}(" for f in sorted(FUNCTIONS))]
    plans += [_quote(n) for n in names] + [f'"{n}"' for n in names if '"' not in n]
    plans += [f"{a}." + _quote(c) for a in ("T1", "T2") for cols in tables.values() for c in cols[:4]]
    plans += [f" AS {a}" for a in _ALIASES] + list(_ALIASES)
    return plans


class Walker:
    """Walks for one compiled grammar (a `CompiledGrammar` of a schema-aware SQL request)."""

    def __init__(self, compiled: Any, tables: dict[str, list[str]], *, seed: int) -> None:
        self.compiled = compiled
        self.rng = random.Random(seed)
        self.plans = plans_for(tables)
        self.tables = tables
        matcher = compiled.matcher()
        self.vocab_size: int = matcher.vocab_size
        texts: list[str] = matcher.vocab.text
        self.texts = texts
        self.ids: dict[str, int] = {}
        for token_id, text in enumerate(texts):
            if text and "\ufffd" not in text:
                self.ids.setdefault(text, token_id)
        self.short = np.asarray([0 < len(t.strip()) <= 3 and t.isascii() for t in texts] + [False] * (self.vocab_size - len(texts)))
        self.separated = np.asarray([bool(t) and not (t[0].isalnum() or t[0] in "_$") for t in texts]
                                    + [False] * (self.vocab_size - len(texts)))
        self.special = np.asarray([bool(_SPECIAL.search(t)) for t in texts]
                                  + [False] * (self.vocab_size - len(texts)))
        self.bitmask = torch.zeros(1, (self.vocab_size + 31) // 32, dtype=torch.int32)

    def _planned(self, allowed: np.ndarray[Any, Any], rest: str) -> int | None:
        """The longest allowed token that is a prefix of `rest`."""
        for end in range(min(len(rest), 16), 0, -1):
            token = self.ids.get(rest[:end])
            if token is not None and allowed[token]:
                return token
        return None

    def query(self) -> str:
        """A random query over the schema (it need not be valid: the walk only follows it)."""
        rng = self.rng
        tables = list(self.tables)
        t1, t2 = rng.choice(tables), rng.choice(tables)
        c1 = [_quote(c) for c in self.tables[t1]] or ["x"]
        c2 = [_quote(c) for c in self.tables[t2]] or ["x"]
        alias = rng.choice(_ALIASES[1:])
        lit = rng.choice(_LITERALS)
        pick = rng.choice
        select = pick([f"T1.{pick(c1)}", f"COUNT(DISTINCT T1.{pick(c1)}) AS {alias}",
                       f"CAST(SUM(CASE WHEN T1.{pick(c1)} = {lit} THEN 1 ELSE 0 END) AS REAL) * 100 / COUNT(*)"
                       f" AS {alias}", f"UPPER(T2.{pick(c2)})", f"{pick(c1)}, {pick(c1)}", "*"])
        where = pick([f"T1.{pick(c1)} = {lit}", f"T2.{pick(c2)} LIKE {lit}", f"{alias} > 1",
                      f"T1.{pick(c1)} IN (SELECT {pick(c2)} FROM {_quote(t2)} WHERE {pick(c2)} = {lit})",
                      f"ROUND(T1.{pick(c1)}, 2) = 1", f"STRFTIME('%Y', T2.{pick(c2)}) = '2020'"])
        tail = pick(["", f" GROUP BY T1.{pick(c1)} HAVING {alias} > 1", f" ORDER BY {alias} DESC LIMIT 1",
                     f" ORDER BY T2.{pick(c2)}"])
        return (f"SELECT {select} FROM {_quote(t1)} AS T1 INNER JOIN {_quote(t2)} AS T2 ON "
                f"T1.{pick(c1)} = T2.{pick(c2)} WHERE {where}{tail}")

    def walk(self, report: WalkReport, *, steps: int, end_bias: float = 0.15, stray: float = 0.05,
             prefix: str = "") -> None:
        """One walk; from `prefix` (accepted first, its plan the random query's words after
        its FROM) where given."""
        matcher = self.compiled.matcher()
        rng = self.rng
        stops = set(matcher.stop_token_ids)
        rest = self.query()
        if prefix:
            assert matcher.accept_text(prefix), prefix
            rest = rest[rest.index(" ON ") + 1:] if rng.random() < 0.5 else rest[rest.index(" WHERE "):]
        report.walks += 1
        for _ in range(steps):
            if matcher.can_stop() and rng.random() < end_bias:
                report.completed += 1
                return
            matcher.fill_mask(self.bitmask, 0)
            allowed = unpack_bitmask(self.bitmask, self.vocab_size)[0].numpy()  # [V] bool
            for stop in stops:
                if stop < len(allowed):
                    allowed[stop] = False
            if not allowed.any():
                if not matcher.can_stop():
                    report.dead_ends.append("".join(self.texts[t] for t in matcher._history))
                else:
                    report.completed += 1
                return
            token = self._planned(allowed, rest) if rest and rng.random() >= stray else None
            if token is None and rest and rng.random() < 0.5:  # a snippet before the rest of the plan
                snippet = rng.choice(self.plans)
                rest = (snippet if rng.random() < 0.3 else " " + snippet.lstrip()) + rest
                token = self._planned(allowed, rest)
            if token is None:  # a random token; the plan goes on from its next word
                rest = rest[rest.find(" ", 1) + 1:] if " " in rest[1:] else ""
                pool = allowed & (self.special if rng.random() < 0.2 else
                                  self.short & self.separated if rng.random() < 0.7 else self.short)
                candidates = np.flatnonzero(pool if pool.any() else allowed)
                token = int(candidates[rng.randrange(len(candidates))])
            else:
                rest = rest[len(self.texts[token]):]
            if not matcher.accept_token(token):
                report.refused.append(("".join(self.texts[t] for t in matcher._history), self.texts[token]))
                return
            report.tokens += 1
