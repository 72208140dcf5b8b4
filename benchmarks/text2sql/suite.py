"""Test-suite execution accuracy (Zhong, Yu, Klein 2020): a predicted query matches the gold
one when their results agree on every database of a suite of filled copies of the schema.

`TestSuite.build(ddl, gold_queries, *, databases=8, seed=0)` fills `databases` copies
(benchmarks.text2sql.fill) with the literals of the gold queries. `suite.run(query)` gives
one `Outcome` per database (rows, or the sqlite error); `suite.match(gold, predicted)`:
- a predicted query that fails on any database does not match;
- results compare as multisets of rows, or as lists when the gold query has a top-level
  ORDER BY; values compare after rounding floats to 6 digits (so 2 == 2.0);
- columns may come in another order (every permutation of up to 6 columns is tried, the
  same one on every database), as in Zhong et al.'s implementation;
- every query runs under a budget of sqlite VM steps (a runaway cross join is an error).
Knows nothing of models.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
from collections import Counter
from dataclasses import dataclass
from typing import Any

from benchmarks.text2sql.fill import fill_database
from benchmarks.text2sql.literals import column_literals
from benchmarks.text2sql.schema import read_schema

STEP_BUDGET = 20_000_000  # sqlite VM instructions per query (progress handler every 1000)
_MAX_PERMUTED_COLUMNS = 6


@dataclass(frozen=True)
class Outcome:
    rows: tuple[tuple[Any, ...], ...] | None
    error: str | None = None


def _normal(value: Any) -> Any:
    if isinstance(value, float):
        rounded = round(value, 6)
        return int(rounded) if rounded.is_integer() else rounded
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def run_query(connection: sqlite3.Connection, query: str) -> Outcome:
    steps = [0]

    def tick() -> int:
        steps[0] += 1000
        return 1 if steps[0] > STEP_BUDGET else 0

    connection.set_progress_handler(tick, 1000)
    try:
        rows = connection.execute(query.strip().rstrip(";")).fetchall()
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as exc:
        return Outcome(None, f"{type(exc).__name__}: {exc}")
    finally:
        connection.set_progress_handler(None, 1000)
    return Outcome(tuple(tuple(_normal(v) for v in row) for row in rows))


def has_top_level_order_by(query: str) -> bool:
    """ORDER BY outside parentheses (a subquery's order does not order the result)."""
    depth = 0
    text = re.sub(r"'(?:[^']|'')*'|\"[^\"]*\"", "''", query)
    for index, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and re.match(r"order\s+by\b", text[index:index + 12], re.IGNORECASE) and \
                (index == 0 or not (text[index - 1].isalnum() or text[index - 1] == "_")):
            return True
    return False


def _same(gold: tuple[tuple[Any, ...], ...], pred: tuple[tuple[Any, ...], ...], perm: tuple[int, ...],
          ordered: bool) -> bool:
    permuted = tuple(tuple(row[i] for i in perm) for row in pred)
    return permuted == gold if ordered else Counter(permuted) == Counter(gold)


def results_match(gold: list[Outcome], pred: list[Outcome], *, ordered: bool) -> bool:
    if any(o.rows is None for o in pred) or any(o.rows is None for o in gold):
        return False
    width = {len(row) for o in gold for row in o.rows or ()}
    pred_width = {len(row) for o in pred for row in o.rows or ()}
    if len(width | pred_width) > 1:
        return False
    columns = next(iter(width | pred_width), 0)
    if any(len(g.rows or ()) != len(p.rows or ()) for g, p in zip(gold, pred, strict=True)):
        return False
    perms = (itertools.permutations(range(columns)) if columns <= _MAX_PERMUTED_COLUMNS
             else iter([tuple(range(columns))]))
    return any(all(_same(g.rows or (), p.rows or (), perm, ordered) for g, p in zip(gold, pred, strict=True))
               for perm in perms)


class TestSuite:
    __test__ = False  # not a pytest class

    def __init__(self, connections: list[sqlite3.Connection]) -> None:
        self.connections = connections

    @classmethod
    def build(cls, ddl: str, gold_queries: list[str], *, databases: int = 8, seed: int = 0) -> TestSuite:
        schema = read_schema(ddl)
        literals = column_literals(gold_queries, schema)
        return cls([fill_database(schema, literals, seed=seed * 1000 + i) for i in range(databases)])

    def run(self, query: str) -> list[Outcome]:
        return [run_query(connection, query) for connection in self.connections]

    def match(self, gold: str, predicted: str) -> bool:
        return results_match(self.run(gold), self.run(predicted), ordered=has_top_level_order_by(gold))

    def close(self) -> None:
        for connection in self.connections:
            connection.close()
