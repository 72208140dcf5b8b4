"""BFCL function specs → OpenAI tools: the dialect's types map to JSON Schema, names become
OpenAI-legal, every BFCL simple_python function converts to a schema jsonschema accepts and
to a tools body spec_from_request accepts."""

from __future__ import annotations

import json
import pathlib

import jsonschema
import pytest

from benchmarks.suite.bfcl import bfcl_schema, bfcl_to_openai_tool, openai_tool_name

JSON_TYPES = {"object", "number", "integer", "string", "boolean", "array", "null"}


def _types(schema: dict) -> set[str]:
    """Every `type` keyword value in a schema (properties' names are not keywords)."""
    found: set[str] = set()
    value = schema.get("type")
    if isinstance(value, str):
        found.add(value)
    elif isinstance(value, list):
        found.update(value)
    for sub in (schema.get("properties") or {}).values():
        found |= _types(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found |= _types(schema[key])
    return found


def test_dialect_types_map_to_json_schema() -> None:
    schema = {
        "type": "dict",
        "properties": {
            "ratio": {"type": "float"},
            "point": {"type": "tuple", "items": {"type": "integer"}},
            "payload": {"type": "any", "description": "anything"},
            "nested": {"type": "dict", "properties": {"xs": {"type": "array", "items": {"type": "float"}}}},
            "type": {"type": "string", "enum": ["a", "b"]},  # a property NAMED "type"
        },
        "required": ["ratio", "type", "missing"],
    }
    out = bfcl_schema(schema)
    assert out["type"] == "object"
    props = out["properties"]
    assert props["ratio"] == {"type": "number"}
    assert props["point"] == {"type": "array", "items": {"type": "integer"}}
    assert props["payload"] == {"description": "anything"}
    assert props["nested"]["properties"]["xs"] == {"type": "array", "items": {"type": "number"}}
    assert props["type"] == {"type": "string", "enum": ["a", "b"]}
    assert out["required"] == ["ratio", "type"]  # a required name with no property is dropped
    assert schema["type"] == "dict"  # input untouched


def test_unknown_type_names_the_path() -> None:
    with pytest.raises(ValueError, match=r"unknown BFCL type 'complex' at #/properties/z"):
        bfcl_schema({"type": "dict", "properties": {"z": {"type": "complex"}}})


def test_tool_shape_and_name() -> None:
    tool = bfcl_to_openai_tool({"name": "math.factorial", "description": "n!",
                                "parameters": {"type": "dict", "properties": {"number": {"type": "integer"}},
                                               "required": ["number"]}})
    assert tool == {"type": "function", "function": {
        "name": "math_factorial", "description": "n!",
        "parameters": {"type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]}}}
    assert openai_tool_name("a.b c/d") == "a_b_c_d"


def test_every_simple_python_function_converts(data_dir: pathlib.Path) -> None:
    from grammars import spec_from_request

    rows = [json.loads(line) for line in (data_dir / "bfcl" / "BFCL_v4_simple_python.json").open()]
    assert len(rows) == 400
    for row in rows:
        tools = [bfcl_to_openai_tool(function) for function in row["function"]]
        for tool in tools:
            jsonschema.Draft202012Validator.check_schema(tool["function"]["parameters"])
            assert _types(tool["function"]["parameters"]) <= JSON_TYPES, row["id"]
        spec = spec_from_request({"tools": tools, "tool_choice": "required"})
        assert spec is not None and spec.kind == "tools", row["id"]
