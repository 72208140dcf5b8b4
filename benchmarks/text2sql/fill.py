"""Filled copies of a schema: seeded random rows, consistent with types and foreign keys.

`fill_database(schema, literals, *, seed) -> sqlite3.Connection` (in memory) creates the
schema from its DDL and inserts rows, table by table, parents before children:
- the number of rows per table is drawn from [2, 24] (small tables make joins, GROUP BY
  collisions and ties frequent; some queries need few rows to separate from others);
- a primary-key column gets distinct values; a foreign-key column takes its values from the
  referenced column's rows (a primary key that is also a foreign key takes distinct ones,
  and its table gets at most as many rows as the parent);
- any other column draws from a small per-column pool: the query literals attached to it
  (benchmarks.text2sql.literals) with probability 1/2, else a typed random value (numbers
  near the literals' range or in [0, 40]; text from a few column-specific words and small
  numerals, since Spider keeps numbers in TEXT columns), so equal values repeat across rows;
- a non-key foreign-key column draws from a random half-to-all of the parent's values;
- no NULLs. Same (schema, literals, seed) → the same database, bit for bit.
Knows nothing of how the databases are compared.
"""

from __future__ import annotations

import random
import sqlite3

from benchmarks.text2sql.schema import Column, Schema, Table

_WORDS = ("alpha", "Bravo", "charlie", "Delta", "echo", "Foxtrot", "golf", "Hotel", "india",
          "Juliet", "kilo", "Lima", "mike", "November", "oscar", "Papa")
Literals = dict[tuple[str, str], list[str | int | float]]


def _order(schema: Schema) -> list[Table]:
    """Tables with referenced tables first (cycles broken in declaration order)."""
    done: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in done or name in visiting:
            return
        visiting.add(name)
        for parent, _ in schema.tables[name].foreign_keys.values():
            resolved = schema.table(parent)
            if resolved is not None and resolved.name != name:
                visit(resolved.name)
        visiting.discard(name)
        done.append(name)

    for name in schema.tables:
        visit(name)
    return [schema.tables[name] for name in done]


def _pool(column: Column, literals: list[str | int | float], rng: random.Random) -> list[str | int | float]:
    if column.kind == "number":
        numbers = [v for v in literals if isinstance(v, int | float)]
        low, high = (min(numbers) - 5, max(numbers) + 5) if numbers else (0, 40)
        values: list[str | int | float] = [rng.randint(int(low), int(high)) for _ in range(6)]
        if "REAL" in column.declared.upper() or any(isinstance(v, float) for v in numbers):
            values += [round(rng.uniform(low, high), 1) for _ in range(3)]
        return values
    stem = column.name.lower()[:6]
    words: list[str | int | float] = [f"{rng.choice(_WORDS)} {stem}{rng.randint(1, 9)}" for _ in range(5)]
    return words + list(rng.sample(_WORDS, 3)) + [str(rng.randint(1, 20)) for _ in range(4)]


def _distinct(column: Column, literals: list[str | int | float], count: int, rng: random.Random) -> list[str | int | float]:
    values: list[str | int | float] = []
    for value in literals:
        if value not in values and (column.kind == "text" or isinstance(value, int | float)):
            values.append(value)
    candidate = 1
    while len(values) < count:
        fresh: str | int | float = candidate if column.kind == "number" else f"{column.name.lower()}_{candidate}"
        if fresh not in values:
            values.append(fresh)
        candidate += rng.randint(1, 3)
    rng.shuffle(values)
    return values[:count]


def fill_database(schema: Schema, literals: Literals, *, seed: int) -> sqlite3.Connection:
    rng = random.Random(seed)
    connection = sqlite3.connect(":memory:")
    connection.executescript(schema.ddl)
    filled: dict[str, dict[str, list[str | int | float]]] = {}  # table -> column -> values
    for table in _order(schema):
        rows = rng.randint(2, 24)
        parent_values: dict[str, list[str | int | float]] = {}
        for source, (parent, target) in table.foreign_keys.items():
            resolved = schema.table(parent)
            if resolved is not None and resolved.name in filled:
                by_lower = {name.lower(): values for name, values in filled[resolved.name].items()}
                if target.lower() in by_lower:
                    parent_values[source] = by_lower[target.lower()]
        for column in table.columns:
            if column.primary_key and column.name in parent_values:
                rows = min(rows, len(set(parent_values[column.name])))
        columns: dict[str, list[str | int | float]] = {}
        for column in table.columns:
            mine = literals.get((table.name, column.name), [])
            if column.name in parent_values:
                source_values = parent_values[column.name]
                if column.primary_key:
                    columns[column.name] = rng.sample(sorted(set(source_values), key=str), rows)
                else:  # a random part of the parent's values, so some parents have no children
                    distinct = sorted(set(source_values), key=str)
                    part = rng.sample(distinct, max(1, round(len(distinct) * rng.uniform(0.5, 1.0))))
                    columns[column.name] = [rng.choice(part) for _ in range(rows)]
            elif column.primary_key:
                columns[column.name] = _distinct(column, mine, rows, rng)
            else:
                pool = _pool(column, mine, rng)
                columns[column.name] = [rng.choice(mine) if mine and rng.random() < 0.5 else rng.choice(pool)
                                        for _ in range(rows)]
        names = [column.name for column in table.columns]
        placeholders = ", ".join("?" for _ in names)
        quoted = ", ".join(f'"{name}"' for name in names)
        connection.executemany(f'INSERT INTO "{table.name}" ({quoted}) VALUES ({placeholders})',
                               list(zip(*(columns[name] for name in names), strict=True)))
        filled[table.name] = columns
    connection.commit()
    return connection
