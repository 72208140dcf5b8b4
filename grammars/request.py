"""spec_from_request: an OpenAI / vLLM request body → one GrammarSpec (or None).

Fields honoured (none silently ignored; a malformed one is a GrammarError naming it):
- `response_format`: {"type": "text"} → None; "json_object"; "json_schema" with
  {"json_schema": {"name", "schema", "strict"}}; "grammar" with
  {"grammar": {"syntax": "lark" | "regex", "definition"}}; "sql" with
  {"sql": {"dialect": "sqlite", "schema": DDL text | {"tables": {...}} | absent, and the
  answer policy `on_invalid` / `max_attempts` / `retry_temperature` (grammars.sql.options),
  which is not part of the grammar}};
- vLLM `structured_outputs`: {json, regex, choice, grammar, json_object} (`grammar` is GBNF /
  xgrammar EBNF when it contains "::=", Lark otherwise), plus specgate's `sql` (the same
  object as `response_format.sql`);
- legacy vLLM `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`;
- `tools` + `tool_choice` + `parallel_tool_calls` (see grammars.tools).
Two constraints in one request (even two spellings of the same one with different content)
→ GrammarError naming both fields. Identical duplicates are allowed.

Strictness: `json_schema.strict: true` runs `check_strict_schema` (unenforceable keywords are
refused); otherwise the best-effort rules of grammars.json.policy apply.

Knows nothing of tokenizers, backends or HTTP.
"""

from __future__ import annotations

import json
import re
from typing import Any

from grammars.errors import GrammarError
from grammars.json.policy import check_strict_schema
from grammars.spec import GrammarSpec, canonical_json
from grammars.sql.grammar import parse_sql_schema
from grammars.sql.options import sql_options
from grammars.tools import tools_spec


def spec_from_request(body: dict[str, Any]) -> GrammarSpec | None:
    """The single output constraint a request asks for, or None (free text)."""
    if not isinstance(body, dict):
        raise GrammarError("the request body must be a JSON object")
    found: list[tuple[str, GrammarSpec]] = []

    def add(param: str, spec: GrammarSpec | None) -> None:
        if spec is not None:
            found.append((param, spec))

    if body.get("response_format") is not None:
        add("response_format", _from_response_format(body["response_format"]))
    if body.get("structured_outputs") is not None:
        add("structured_outputs", _from_structured_outputs(body["structured_outputs"]))
    for key in ("guided_json", "guided_regex", "guided_choice", "guided_grammar"):
        if body.get(key) is not None:
            add(key, _from_vllm_field(key.removeprefix("guided_"), body[key], param=key))
    add("tools", tools_spec(body.get("tools"), body.get("tool_choice"),
                            body.get("parallel_tool_calls")))

    distinct = {spec for _, spec in found}
    if len(distinct) > 1:
        fields = ", ".join(param for param, _ in found)
        raise GrammarError(
            f"conflicting output constraints in one request: {fields}", param=found[1][0]
        )
    return found[0][1] if found else None


def _json_schema_spec(schema: Any, *, strict: bool, param: str) -> GrammarSpec:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise GrammarError(f"the JSON schema is not valid JSON: {exc}", param=param) from exc
    if not isinstance(schema, dict | bool):
        raise GrammarError("a JSON schema must be an object or a boolean", param=param)
    if strict:
        check_strict_schema(schema, param=param)
    return GrammarSpec("json_schema", canonical_json(schema), (("strict", strict),))


def _from_response_format(fmt: Any) -> GrammarSpec | None:
    param = "response_format"
    if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
        raise GrammarError("response_format must be an object with a 'type'", param=param)
    kind = fmt["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return GrammarSpec("json_object", "")
    if kind == "json_schema":
        inner = fmt.get("json_schema")
        if not isinstance(inner, dict) or "schema" not in inner:
            raise GrammarError("response_format.json_schema needs a 'schema'",
                               param="response_format.json_schema")
        return _json_schema_spec(inner["schema"], strict=bool(inner.get("strict", False)),
                                 param="response_format.json_schema.schema")
    if kind == "grammar":
        inner = fmt.get("grammar")
        if not isinstance(inner, dict) or not isinstance(inner.get("definition"), str):
            raise GrammarError("response_format.grammar needs a 'definition' string",
                               param="response_format.grammar")
        syntax = inner.get("syntax", "lark")
        if syntax == "lark":
            return _grammar_spec(inner["definition"], "lark", param="response_format.grammar")
        if syntax == "regex":
            return _regex_spec(inner["definition"], param="response_format.grammar.definition")
        raise GrammarError(f"unsupported grammar syntax {syntax!r} (expected 'lark' or 'regex')",
                           param="response_format.grammar.syntax")
    if kind == "sql":
        return _sql_spec(fmt.get("sql") or {}, param="response_format.sql")
    raise GrammarError(f"unsupported response_format type {kind!r}", param="response_format.type")


def _from_structured_outputs(outputs: Any) -> GrammarSpec | None:
    param = "structured_outputs"
    if not isinstance(outputs, dict):
        raise GrammarError("structured_outputs must be an object", param=param)
    known = ("json", "regex", "choice", "grammar", "json_object", "sql")
    specs = []
    for key, value in outputs.items():
        if value is None or value is False:
            continue
        if key in known:
            specs.append(_from_vllm_field(key, value, param=f"{param}.{key}"))
        elif key in ("disable_fallback", "disable_any_whitespace", "disable_additional_properties",
                     "whitespace_pattern", "backend", "_backend", "_backend_was_auto"):
            continue  # backend hints with no effect on the constraint
        else:
            raise GrammarError(f"unsupported structured_outputs field '{key}'",
                               param=f"{param}.{key}")
    if len(set(specs)) > 1:
        raise GrammarError("structured_outputs sets more than one constraint", param=param)
    return specs[0] if specs else None


def _from_vllm_field(key: str, value: Any, *, param: str) -> GrammarSpec:
    if key == "sql":
        return _sql_spec(value, param=param)
    if key == "json":
        return _json_schema_spec(value, strict=False, param=param)
    if key == "json_object":
        return GrammarSpec("json_object", "")
    if key == "regex":
        return _regex_spec(value, param=param)
    if key == "choice":
        if (not isinstance(value, list) or not value
                or not all(isinstance(choice, str) for choice in value)):
            raise GrammarError("choice must be a non-empty list of strings", param=param)
        return GrammarSpec("choice", canonical_json(value))
    if key == "grammar":
        if not isinstance(value, str):
            raise GrammarError("grammar must be a string", param=param)
        return _grammar_spec(value, "ebnf" if "::=" in value else "lark", param=param)
    raise GrammarError(f"unsupported field '{key}'", param=param)


def _regex_spec(pattern: Any, *, param: str) -> GrammarSpec:
    if not isinstance(pattern, str) or not pattern:
        raise GrammarError("regex must be a non-empty string", param=param)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise GrammarError(f"invalid regex: {exc}", param=param) from exc
    return GrammarSpec("regex", pattern)


def _grammar_spec(text: str, kind: str, *, param: str) -> GrammarSpec:
    if not text.strip():
        raise GrammarError("the grammar is empty", param=param)
    return GrammarSpec(kind, text.strip() + "\n")


def _sql_spec(sql: Any, *, param: str) -> GrammarSpec:
    if not isinstance(sql, dict):
        raise GrammarError(f"{param} must be an object", param=param)
    sql_options(sql, param=param)  # the answer policy: validated here, applied by the gateway
    dialect = sql.get("dialect", "sqlite")
    if dialect != "sqlite":
        raise GrammarError(f"unsupported SQL dialect {dialect!r} (only 'sqlite')",
                           param=f"{param}.dialect")
    schema = sql.get("schema")
    tables = None if schema is None else parse_sql_schema(schema, param=f"{param}.schema")
    source = canonical_json({"dialect": dialect, "schema": None if tables is None
                             else {"tables": tables}})
    return GrammarSpec("sql", source)
