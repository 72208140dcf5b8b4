"""Literals of SQL queries, attached to the columns they are compared with.

`column_literals(queries, schema) -> {(table, column): [values]}`: for every comparison
`col op literal`, `col [NOT] IN (literals)`, `col [NOT] BETWEEN a AND b` and
`col [NOT] LIKE 'pattern'` in the queries, the literal goes to every schema column of that
name (qualifiers are aliases, so the name alone decides). Numbers also bring their
neighbours (n-1, n+1) so that `>`/`<` boundaries are exercised; a LIKE pattern becomes
strings that match it (wildcards filled with random-looking text) and one that does not.
This is the "literals that appear in the queries" part of Zhong et al.'s test suites: a
filled database must contain them, or most WHERE clauses select nothing.
"""

from __future__ import annotations

import re
from collections import defaultdict

from benchmarks.text2sql.schema import Schema

_NAME = r"(?:\w+\.)?\"?(\w+)\"?"
_LIT = r"('(?:[^']|'')*'|\"[^\"]*\"|-?\d+(?:\.\d+)?)"
_CMP = re.compile(_NAME + r"\s*(?:=|==|!=|<>|<=|>=|<|>)\s*" + _LIT, re.IGNORECASE)
_CMP_REV = re.compile(_LIT + r"\s*(?:=|==|!=|<>|<=|>=|<|>)\s*" + _NAME, re.IGNORECASE)
_LIKE = re.compile(_NAME + r"\s+(?:NOT\s+)?LIKE\s+" + _LIT, re.IGNORECASE)
_BETWEEN = re.compile(_NAME + r"\s+(?:NOT\s+)?BETWEEN\s+" + _LIT + r"\s+AND\s+" + _LIT, re.IGNORECASE)
_IN = re.compile(_NAME + r"\s+(?:NOT\s+)?IN\s*\(([^()]*)\)", re.IGNORECASE)
_ANY_LIT = re.compile(_LIT)


def literal_value(token: str) -> str | int | float:
    if token[:1] == "'":
        return token[1:-1].replace("''", "'")
    if token[:1] == '"':
        return token[1:-1]
    number = float(token)
    return int(number) if number.is_integer() and "." not in token else number


def _like_examples(pattern: str) -> list[str]:
    if "%" not in pattern and "_" not in pattern:
        return [pattern]
    filled = [pattern.replace("%", fill).replace("_", "x") for fill in ("", "ab", "Zq r")]
    return [*filled, "no" + pattern.replace("%", "").replace("_", "") [::-1] + "pe"]


def column_literals(queries: list[str], schema: Schema) -> dict[tuple[str, str], list[str | int | float]]:
    by_name: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for table in schema.tables.values():
        for column in table.columns:
            by_name[column.name.lower()].append((table.name, column.name))
    found: dict[tuple[str, str], list[str | int | float]] = defaultdict(list)

    def add(name: str, values: list[str | int | float]) -> None:
        for key in by_name.get(name.lower(), []):
            for value in values:
                if value not in found[key]:
                    found[key].append(value)

    def with_neighbours(token: str) -> list[str | int | float]:
        value = literal_value(token)
        if isinstance(value, str):
            return [value]
        return [value, value - 1, value + 1]

    for query in queries:
        for match in _LIKE.finditer(query):
            add(match.group(1), list(_like_examples(str(literal_value(match.group(2))))))
        for match in _CMP.finditer(query):
            add(match.group(1), with_neighbours(match.group(2)))
        for match in _CMP_REV.finditer(query):
            add(match.group(2), with_neighbours(match.group(1)))
        for match in _BETWEEN.finditer(query):
            add(match.group(1), with_neighbours(match.group(2)) + with_neighbours(match.group(3)))
        for match in _IN.finditer(query):
            add(match.group(1), [v for tok in _ANY_LIT.findall(match.group(2)) for v in with_neighbours(tok)])
    return dict(found)
