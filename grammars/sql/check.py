"""Does a SQL answer run on its schema? sqlite decides, not the grammar.

`check_sql(query, tables) -> SqlCheck` builds an in-memory sqlite database with the schema's
tables and columns (`CREATE TABLE "t" ("c1", "c2", ...)`: names are all `EXPLAIN` needs;
types do not change whether a statement compiles) and prepares the query with `EXPLAIN`,
which parses it and resolves every table, column, alias and function without reading a
row. Verdicts (`SqlCheck.status`):
- "ok": sqlite compiled it (it runs on any database with this schema);
- "syntax": sqlite could not parse it (syntax error, incomplete input, unrecognized token);
- "semantic": it parses but does not resolve (no such column, ambiguous column name, wrong
  number of arguments, misuse of aggregate, ...); `error` carries sqlite's message;
- "empty": nothing to check (blank text).
More than one statement is refused ("syntax"). Never raises on bad SQL. Knows nothing of
tokenizers, models or HTTP.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from functools import lru_cache

_SYNTAX_MARKERS = ("syntax error", "incomplete input", "unrecognized token", "one statement at a time",
                   "unterminated")


@dataclass(frozen=True)
class SqlCheck:
    status: str  # "ok" | "syntax" | "semantic" | "empty"
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.status == "ok"

    @property
    def parses(self) -> bool:
        return self.status in ("ok", "semantic")

    def as_dict(self) -> dict[str, object]:
        return {"valid": self.valid, "status": self.status, "error": self.error}


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@lru_cache(maxsize=256)
def _schema_ddl(tables: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    return "\n".join(f"CREATE TABLE {_quote(name)} ({', '.join(_quote(c) for c in columns) or '_'});"
                     for name, columns in tables)


def schema_ddl(tables: dict[str, list[str]]) -> str:
    """Minimal DDL for `tables` ({table: [columns]})."""
    return _schema_ddl(tuple((name, tuple(columns)) for name, columns in tables.items()))


def check_sql(query: str, tables: dict[str, list[str]] | str) -> SqlCheck:
    """Verdict on `query` against `tables` ({table: [columns]} or DDL text run as is)."""
    text = query.strip()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    if not text:
        return SqlCheck("empty", "no SQL in the answer")
    ddl = tables if isinstance(tables, str) else schema_ddl(tables)
    connection = sqlite3.connect(":memory:")
    try:
        connection.executescript(ddl)
        connection.execute("EXPLAIN " + text)
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as exc:
        message = str(exc)
        syntax = isinstance(exc, sqlite3.Warning | sqlite3.ProgrammingError) or any(
            marker in message.lower() for marker in _SYNTAX_MARKERS)
        return SqlCheck("syntax" if syntax else "semantic", message)
    finally:
        connection.close()
    return SqlCheck("ok")
