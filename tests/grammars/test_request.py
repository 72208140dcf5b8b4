"""spec_from_request: every request field and shape, canonical specs, and errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from grammars import GrammarError, GrammarSpec, spec_from_request

SCHEMA = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}},
          "required": ["b"]}


def test_no_constraint() -> None:
    assert spec_from_request({}) is None
    assert spec_from_request({"response_format": {"type": "text"}}) is None
    assert spec_from_request({"response_format": None, "tools": None}) is None


def test_json_object_all_spellings_equal() -> None:
    specs = {
        spec_from_request({"response_format": {"type": "json_object"}}),
        spec_from_request({"structured_outputs": {"json_object": True}}),
    }
    assert specs == {GrammarSpec("json_object", "")}


def test_json_schema_canonical_keeps_property_order() -> None:
    spec = spec_from_request({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": SCHEMA, "strict": False}}})
    assert spec is not None and spec.kind == "json_schema"
    assert list(json.loads(spec.source)["properties"]) == ["b", "a"]
    assert spec.option("strict") is False
    same = spec_from_request({"structured_outputs": {"json": json.dumps(SCHEMA, indent=2)}})
    assert same == spec and hash(same) == hash(spec)
    legacy = spec_from_request({"guided_json": SCHEMA})
    assert legacy == spec


def test_regex_choice_grammar_fields() -> None:
    assert spec_from_request({"guided_regex": "[a-z]+"}) == GrammarSpec("regex", "[a-z]+")
    assert spec_from_request({"structured_outputs": {"regex": "[a-z]+"}}) == GrammarSpec(
        "regex", "[a-z]+")
    rf = spec_from_request({"response_format": {"type": "grammar", "grammar": {
        "syntax": "regex", "definition": "[a-z]+"}}})
    assert rf == GrammarSpec("regex", "[a-z]+")
    choice = spec_from_request({"guided_choice": ["yes", "no"]})
    assert choice is not None and choice.kind == "choice" and choice.source_json == ["yes", "no"]
    assert spec_from_request({"structured_outputs": {"choice": ["yes", "no"]}}) == choice
    ebnf = spec_from_request({"structured_outputs": {"grammar": 'root ::= "a"'}})
    assert ebnf is not None and ebnf.kind == "ebnf"
    lark = spec_from_request({"guided_grammar": 'start: "a"'})
    assert lark is not None and lark.kind == "lark"
    lark_rf = spec_from_request({"response_format": {"type": "grammar", "grammar": {
        "syntax": "lark", "definition": 'start: "a"'}}})
    assert lark_rf == lark


def test_conflicting_constraints_rejected() -> None:
    with pytest.raises(GrammarError, match="conflicting") as info:
        spec_from_request({"response_format": {"type": "json_object"}, "guided_regex": "a"})
    assert info.value.param == "guided_regex"
    with pytest.raises(GrammarError):
        spec_from_request({"structured_outputs": {"regex": "a", "choice": ["b"]}})
    tools = [{"type": "function", "function": {"name": "f"}}]
    with pytest.raises(GrammarError, match="conflicting"):
        spec_from_request({"tools": tools, "tool_choice": "required",
                           "response_format": {"type": "json_object"}})
    # identical duplicates are not a conflict
    assert spec_from_request({"guided_regex": "a", "structured_outputs": {"regex": "a"}})


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"response_format": "json"}, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
         "response_format.json_schema"),
        ({"response_format": {"type": "grammar", "grammar": {"syntax": "peg",
                                                             "definition": "x"}}},
         "response_format.grammar.syntax"),
        ({"guided_regex": "(unclosed"}, "guided_regex"),
        ({"guided_choice": []}, "guided_choice"),
        ({"guided_json": "{not json"}, "guided_json"),
        ({"structured_outputs": {"structural_tag": "x"}}, "structured_outputs.structural_tag"),
        ({"response_format": {"type": "sql", "sql": {"dialect": "oracle"}}},
         "response_format.sql.dialect"),
        ({"response_format": {"type": "sql", "sql": {"schema": "not ddl"}}},
         "response_format.sql.schema"),
    ],
)
def test_bad_fields_name_the_param(body: dict, param: str) -> None:
    with pytest.raises(GrammarError) as info:
        spec_from_request(body)
    assert info.value.param == param
    assert info.value.message


def test_strict_schema_refuses_unenforceable_keyword_with_pointer() -> None:
    schema = {"type": "object", "properties": {"foo": {"type": "object",
              "patternProperties": {"^a": {"type": "integer"}}, "not": {"required": ["x"]}}}}
    with pytest.raises(GrammarError, match=r"unsupported keyword 'not' at /properties/foo"):
        spec_from_request({"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": schema, "strict": True}}})
    with pytest.raises(GrammarError, match=r"'oneOf' at /items"):
        spec_from_request({"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "strict": True, "schema": {"type": "array", "items": {
                "oneOf": [{"type": "integer"}, {"type": "string"}]}}}}})
    with pytest.raises(GrammarError, match=r"unsupported format 'iri' at /\$defs/u/format"):
        spec_from_request({"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "strict": True, "schema": {"$defs": {"u": {"type": "string",
                                                                    "format": "iri"}}}}}})
    # the same schema without strict is accepted (best effort, documented)
    assert spec_from_request({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": schema}}}) is not None
    # enforced keywords pass strict
    assert spec_from_request({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "strict": True, "schema": {"type": "object", "patternProperties": {
            "^a": {"type": "integer"}}, "additionalProperties": False}}}}) is not None


@pytest.mark.parametrize("schema, message", [
    ({"type": "string", "frobnicate": 1}, "unknown keyword 'frobnicate' at /"),
    ({"type": "object", "properties": {"name": {"type": "string", "maxLenght": 5}},
      "required": ["name"], "additionalProperties": False},
     "unknown keyword 'maxLenght' at /properties/name"),
    ({"type": "array", "items": {"anyOf": [{"type": "integer", "x-unit": "cm"}]}},
     "unknown keyword 'x-unit' at /items/anyOf/0"),
])
def test_strict_schema_refuses_unknown_keyword_with_pointer(schema: Any, message: str) -> None:
    body = {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": schema, "strict": True}}}
    with pytest.raises(GrammarError) as info:
        spec_from_request(body)
    assert info.value.message == message
    assert info.value.param == "response_format.json_schema.schema"
    # strict tools too; without strict an unknown keyword is an annotation (ignored)
    tools = {"tools": [{"type": "function", "function": {
        "name": "f", "parameters": schema, "strict": True}}], "tool_choice": "required"}
    with pytest.raises(GrammarError, match="unknown keyword"):
        spec_from_request(tools)
    del body["response_format"]["json_schema"]["strict"]
    assert spec_from_request(body) is not None


def test_property_names_and_annotations_are_not_unknown_keywords() -> None:
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "t",
              "type": "object", "properties": {"frobnicate": {"type": "string",
                                                              "description": "d"}},
              "$defs": {"maxLenght": {"type": "integer", "examples": [1]}},
              "required": ["frobnicate"], "additionalProperties": False}
    assert spec_from_request({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": schema, "strict": True}}}) is not None


def test_sql_specs() -> None:
    generic = spec_from_request({"response_format": {"type": "sql", "sql": {"dialect": "sqlite"}}})
    assert generic is not None and generic.source_json["schema"] is None
    ddl = 'CREATE TABLE "t" ("a" INT, b TEXT, PRIMARY KEY ("a"));'
    from_ddl = spec_from_request({"response_format": {"type": "sql", "sql": {"schema": ddl}}})
    from_json = spec_from_request({"response_format": {"type": "sql", "sql": {
        "schema": {"tables": {"t": ["a", "b"]}}}}})
    assert from_ddl == from_json
    assert from_ddl is not None and from_ddl.source_json["schema"] == {"tables": {"t": ["a", "b"]}}
