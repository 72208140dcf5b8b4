"""Reading a query through the scope layer alone, one character at a time (test helper).

`refused_at(text, tables)` is the index of the first character SqlScope refuses (fed, then
not viable), None where it reads the whole text; with `must_end`, len(text) where it reads it
all but the query may not end there."""

from __future__ import annotations

from grammars.sql.grammar import FUNCTIONS
from grammars.sql.scope import SqlSchema, SqlScope


def refused_at(text: str, tables: dict[str, list[str]], *, must_end: bool = False) -> int | None:
    reader = SqlScope(SqlSchema(tables, FUNCTIONS))
    for index, ch in enumerate(text):
        if not (reader.feed(ch) and reader.viable()):
            return index
    return len(text) if must_end and not reader.can_end() else None
