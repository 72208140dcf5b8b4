"""BFCL function specs → OpenAI function tools.

BFCL (Berkeley Function Calling Leaderboard) writes parameter schemas in its own dialect of
JSON Schema: `dict` for object, `float` for number, `tuple` for array, `any` for no type
constraint, and function names with dots (`math.factorial`), which OpenAI tool names do not
allow (`^[a-zA-Z0-9_-]{1,64}$`). BFCL's own OpenAI handler replaces "." by "_"; so do we.

Contract: `bfcl_schema(schema)` returns a new JSON Schema (the input is not modified) in which
every `type` is a JSON Schema type (or absent, for `any`), recursing through `properties`,
`items`, `additionalProperties` and `anyOf`/`oneOf`. A property *named* "type" is a property,
never mistaken for the `type` keyword. An unknown BFCL type raises ValueError naming it and
the path. `bfcl_to_openai_tool(function)` wraps one BFCL function as
`{"type": "function", "function": {"name", "description", "parameters"}}`.

Knows nothing about grammars, models or prompts.
"""

from __future__ import annotations

import re
from typing import Any

TYPE_MAP: dict[str, str | None] = {
    "dict": "object",
    "object": "object",
    "float": "number",
    "number": "number",
    "integer": "integer",
    "int": "integer",
    "string": "string",
    "str": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
    "any": None,
    "null": "null",
}
_NAME_OK = re.compile(r"[^a-zA-Z0-9_-]")


def openai_tool_name(name: str) -> str:
    """BFCL's OpenAI spelling of a function name: every disallowed character becomes '_'."""
    return _NAME_OK.sub("_", name)[:64]


def bfcl_schema(schema: Any, *, path: str = "#") -> dict[str, Any]:
    """One BFCL parameter schema → JSON Schema (a new dict)."""
    if not isinstance(schema, dict):
        raise ValueError(f"BFCL schema at {path} is not an object: {schema!r}")
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            types = value if isinstance(value, list) else [value]
            mapped: list[str] = []
            for bfcl_type in types:
                if not isinstance(bfcl_type, str) or bfcl_type not in TYPE_MAP:
                    raise ValueError(f"unknown BFCL type {bfcl_type!r} at {path}")
                json_type = TYPE_MAP[bfcl_type]
                if json_type is None:  # `any`: no type constraint at all
                    mapped = []
                    break
                mapped.append(json_type)
            if len(mapped) == 1:
                out["type"] = mapped[0]
            elif mapped:
                out["type"] = sorted(set(mapped), key=mapped.index)
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: bfcl_schema(sub, path=f"{path}/properties/{name}") for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = bfcl_schema(value, path=f"{path}/{key}")
        elif key in ("anyOf", "oneOf", "allOf", "prefixItems") and isinstance(value, list):
            out[key] = [bfcl_schema(sub, path=f"{path}/{key}/{i}") for i, sub in enumerate(value)]
        elif key == "optional":
            continue  # BFCL annotation; `required` already says it
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" in out and "required" in out:
        out["required"] = [name for name in out["required"] if name in out["properties"]]
    return out


def bfcl_to_openai_tool(function: dict[str, Any]) -> dict[str, Any]:
    """One BFCL function spec → an OpenAI function tool."""
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"BFCL function without a name: {function!r}")
    parameters = bfcl_schema(function.get("parameters") or {"type": "dict", "properties": {}},
                             path=f"{name}.parameters")
    parameters.setdefault("type", "object")
    return {
        "type": "function",
        "function": {
            "name": openai_tool_name(name),
            "description": str(function.get("description", "")),
            "parameters": parameters,
        },
    }
