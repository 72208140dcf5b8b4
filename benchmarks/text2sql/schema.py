"""A database schema read by sqlite itself: tables, typed columns, primary and foreign keys.

`read_schema(ddl) -> Schema` runs the DDL in an in-memory sqlite and reads it back with
`PRAGMA table_info` / `PRAGMA foreign_key_list`, so what the filler sees is exactly what
sqlite understood (no DDL parser of our own). Column `kind` is "number" or "text", from
sqlite's type-affinity rules on the declared type. Knows nothing of rows or queries.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Column:
    table: str
    name: str
    declared: str
    kind: str  # "number" | "text"
    primary_key: bool


@dataclass
class Table:
    name: str
    columns: list[Column]
    foreign_keys: dict[str, tuple[str, str]] = field(default_factory=dict)  # column -> (table, column)


@dataclass
class Schema:
    ddl: str
    tables: dict[str, Table]

    def table(self, name: str) -> Table | None:
        for table in self.tables.values():
            if table.name.lower() == name.lower():
                return table
        return None


def affinity_kind(declared: str) -> str:
    """sqlite's affinity rules (section 3.1 of the datatype docs), folded to number/text."""
    upper = declared.upper()
    if "INT" in upper:
        return "number"
    if any(word in upper for word in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if "BLOB" in upper or not upper:
        return "text"
    return "number"  # REAL / FLOA / DOUB / NUMERIC and anything else (e.g. Spider's OTHERS)


def read_schema(ddl: str) -> Schema:
    connection = sqlite3.connect(":memory:")
    try:
        connection.executescript(ddl)
        names = [row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
        tables: dict[str, Table] = {}
        for name in names:
            info = connection.execute(f'PRAGMA table_info("{name}")').fetchall()
            columns = [Column(name, str(row[1]), str(row[2] or ""), affinity_kind(str(row[2] or "")),
                              bool(row[5])) for row in info]
            table = Table(name, columns)
            for row in connection.execute(f'PRAGMA foreign_key_list("{name}")').fetchall():
                parent, source, target = str(row[2]), str(row[3]), row[4]
                table.foreign_keys[source] = (parent, str(target) if target is not None else source)
            tables[name] = table
        return Schema(ddl, tables)
    finally:
        connection.close()
