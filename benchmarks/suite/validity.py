"""Is an output valid for its case? Independent oracles, never the grammar that produced it.

- json: `json.loads` then python-jsonschema (Draft 2020-12) against the case's schema;
- tools: `grammars.parse_tool_calls`, at least one call, every call names a provided tool
  and its arguments validate against that tool's `parameters` schema;
- sql: sqlite3 in memory: run the case's DDL, then `EXPLAIN` the query (parses it and
  resolves every table and column without needing rows); with `extract` set in the check
  (unconstrained text2sql answers) the SQL is first taken out of the answer
  (benchmarks.text2sql.sample.extract_sql).

`is_valid(text, check) -> bool` never raises on bad model output (that is just invalid);
it raises ValueError for an unknown check kind. Knows nothing about models or timing.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import jsonschema


def valid_json(text: str, schema: dict[str, Any]) -> bool:
    try:
        instance = json.loads(text)
    except (ValueError, RecursionError):
        return False
    try:
        jsonschema.Draft202012Validator(schema).validate(instance)
    except jsonschema.ValidationError:
        return False
    except jsonschema.SchemaError:
        return False
    return True


def valid_tool_calls(text: str, tools: list[dict[str, Any]]) -> bool:
    from grammars import parse_tool_calls

    by_name = {tool["function"]["name"]: tool["function"].get("parameters") or {} for tool in tools}
    _content, calls = parse_tool_calls(text, by_name)
    if not calls:
        return False
    for call in calls:
        if call.name not in by_name or not valid_json(call.arguments, by_name[call.name]):
            return False
    return True


def valid_sql(text: str, ddl: str) -> bool:
    query = text.strip().rstrip(";").strip()
    if not query:
        return False
    connection = sqlite3.connect(":memory:")
    try:
        connection.executescript(ddl)
        connection.execute(f"EXPLAIN {query}")
    except (sqlite3.Error, sqlite3.Warning, ValueError):
        return False
    finally:
        connection.close()
    return True


def is_valid(text: str, check: dict[str, Any]) -> bool:
    kind = check.get("kind")
    if kind == "json":
        return valid_json(text, check["schema"])
    if kind == "tools":
        return valid_tool_calls(text, check["tools"])
    if kind == "sql":
        if check.get("extract"):  # unconstrained answers: the SQL in the answer (fences stripped)
            from benchmarks.text2sql.sample import extract_sql

            text = extract_sql(text)
        return valid_sql(text, check["ddl"])
    raise ValueError(f"unknown validity check kind {kind!r}")
