"""close_unlisted (policy rule 1 for llguidance): names listed by `anyOf` / `oneOf` branches count
as listed on the parent; nothing under `not` / `if` is closed; the result never admits an
instance the input schema refuses (python-jsonschema on fixed and generated instances)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from grammars import GrammarSpec
from grammars.backends.llguidance.closure import close_unlisted
from grammars.spec import canonical_json

# reduced from JSONSchemaBench Github_easy o69635 (a message schema): the parent lists `msg`
# and `argument`, each branch adds its own members; the parent used to be closed on its own
# two names, so no branch with `queryId` could ever be written
MESSAGE = {
    "type": "object",
    "properties": {"msg": {"type": "string", "enum": ["close", "execScript"]},
                   "argument": {"type": "string"}},
    "required": ["msg", "argument"],
    "oneOf": [
        {"properties": {"msg": {"enum": ["close"]}, "argument": {"maxLength": 0}},
         "additionalProperties": False},
        {"properties": {"msg": {"enum": ["execScript"]}, "argument": {"minLength": 1},
                        "queryId": {"type": "integer", "minimum": 1},
                        "watchVariables": {"type": "boolean"}},
         "required": ["queryId"]},
    ],
}
VALID = '{"msg": "execScript", "argument": "x", "queryId": 1, "watchVariables": true}'
INVALID = [
    '{"msg": "execScript", "argument": "x"}',  # the branch's required queryId is missing
    '{"msg": "execScript", "argument": "x", "queryId": 0}',  # minimum
    '{"msg": "close", "argument": "", "queryId": 1}',  # queryId is not a `close` member
]
NEGATED = {"type": "object", "properties": {"a": {"type": "integer"}},
           "not": {"properties": {"a": {"const": 1}}},
           "if": {"properties": {"a": {"const": 2}}}, "then": {"required": ["b"]}}


def _valid(schema: Any, instance: Any) -> bool:
    cls = jsonschema.validators.validator_for(schema)
    return bool(cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(instance))


def test_branch_names_count_as_listed_on_the_parent() -> None:
    closed = close_unlisted(MESSAGE)
    assert closed["additionalProperties"] is False
    assert list(closed["properties"]) == ["msg", "argument", "queryId", "watchVariables"]
    assert "additionalProperties" not in MESSAGE  # the input is not modified


# a discriminated union: the parent names the tag, each `$ref` branch adds its members; the
# parent used to be closed on `kind` alone, so no branch member could ever be written
UNION = {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"],
         "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
         "$defs": {"Cat": {"properties": {"kind": {"const": "cat"}, "meow": {"type": "boolean"}}},
                   "Dog": {"properties": {"kind": {"const": "dog"}, "bark": {"type": "integer"}}}}}


def test_a_ref_branch_lists_its_target_names_on_the_parent() -> None:
    assert list(close_unlisted(UNION)["properties"]) == ["kind", "meow", "bark"]
    opened = {**UNION, "$defs": {**UNION["$defs"], "Dog": {"additionalProperties": True}}}
    assert list(close_unlisted(opened)["properties"]) == ["kind"]  # a branch opens: own names


def test_llguidance_accepts_a_ref_branch_member(llg_compiler) -> None:  # type: ignore[no-untyped-def]
    compiled = llg_compiler.compile(GrammarSpec("json_schema", canonical_json(UNION),
                                                (("strict", False),)))
    assert compiled.backend == "llguidance"
    assert _accepts(compiled, '{"kind": "cat", "meow": true}')
    assert _accepts(compiled, '{"kind": "dog", "bark": 2}')
    for text in ['{"kind": "cat", "zzz": 1}', '{"kind": "cow"}', '{"kind": "dog", "bark": "x"}']:
        assert not _accepts(compiled, text), text


def test_nothing_under_not_or_if_is_closed() -> None:
    closed = close_unlisted(NEGATED)
    assert "additionalProperties" not in closed["not"]
    assert "additionalProperties" not in closed["if"]
    assert closed["additionalProperties"] is False


def test_the_closed_schema_admits_the_valid_branch_instance() -> None:
    assert _valid(MESSAGE, json.loads(VALID))
    assert _valid(close_unlisted(MESSAGE), json.loads(VALID))
    for text in INVALID:
        assert not _valid(close_unlisted(MESSAGE), json.loads(text))


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.sampled_from(["", "x"]))
_OBJECTS = st.dictionaries(
    st.sampled_from(["msg", "argument", "queryId", "watchVariables", "a", "b", "zip", "kind",
                     "meow", "bark"]),
    st.one_of(_VALUES, st.sampled_from(["close", "execScript", "cat", "dog"])), max_size=5)


@settings(max_examples=400, deadline=None)
@given(_OBJECTS)
def test_closing_never_admits_what_the_schema_refuses(instance: dict[str, Any]) -> None:
    for schema in (MESSAGE, NEGATED, UNION):
        if _valid(close_unlisted(schema), instance):
            assert _valid(schema, instance)


def _accepts(compiled: Any, text: str) -> bool:
    matcher = compiled.matcher()
    return bool(matcher.accept_text(text) and matcher.can_stop())


def test_the_parent_closed_on_its_own_names_refused_the_branch_member(llg_compiler) -> None:  # type: ignore[no-untyped-def]
    before = {**MESSAGE, "additionalProperties": False}  # what close_unlisted used to make
    compiled = llg_compiler.compile(GrammarSpec("json_schema", canonical_json(before),
                                                (("strict", False),)))
    assert not _accepts(compiled, VALID)


def test_llguidance_accepts_a_branch_member_and_still_refuses_invalid(llg_compiler) -> None:  # type: ignore[no-untyped-def]
    compiled = llg_compiler.compile(GrammarSpec("json_schema", canonical_json(MESSAGE),
                                                (("strict", False),)))
    assert compiled.backend == "llguidance"
    assert _accepts(compiled, VALID)  # refused before: the parent was closed on msg/argument
    for text in INVALID + ['{"msg": "execScript", "argument": "x", "queryId": 1, "zip": 1}']:
        assert not _accepts(compiled, text), text


# reduced from held-out Github_ultra o2312 (an ActionScript config): an app config is
# `allOf: [{"$ref": base}, {"properties": {"type": …}}]`; closing `base` where it is defined
# refused `type`, which the other member lists
APP = {"type": "object",
       "anyOf": [{"allOf": [{"$ref": "#/definitions/app"}, {"required": ["mainClass"]}]}],
       "definitions": {
           "base": {"type": "object", "properties": {"files": {"type": "array"}}},
           "via": {"$ref": "#/definitions/base"},
           "app": {"allOf": [{"$ref": "#/definitions/via"},
                             {"properties": {"type": {"type": "string"},
                                             "mainClass": {"type": "string"}}}]}}}
APP_VALID = '{"files": ["src/Main.as"], "type": "app", "mainClass": "Main"}'


def test_a_ref_target_reached_from_an_allof_member_stays_open() -> None:
    closed = close_unlisted(APP)
    assert "additionalProperties" not in closed["definitions"]["base"]  # through `via` too
    members = closed["definitions"]["app"]["allOf"]
    assert "additionalProperties" not in members[1]


def test_llguidance_accepts_the_sibling_member_of_a_ref_target(llg_compiler) -> None:  # type: ignore[no-untyped-def]
    assert _valid(APP, json.loads(APP_VALID))
    compiled = llg_compiler.compile(GrammarSpec("json_schema", canonical_json(APP),
                                                (("strict", False),)))
    assert compiled.backend == "llguidance"
    assert _accepts(compiled, APP_VALID)
    assert not _accepts(compiled, '{"files": [], "type": "app"}')  # mainClass is required


# an object that adds members to an `allOf` base (OpenAPI's usual composition); the parent
# used to be closed on its own names, and llguidance merges that into the member, so the
# base's `b` could never be written
COMPOSED = {"type": "object", "properties": {"a": {"type": "integer"}},
            "allOf": [{"$ref": "#/$defs/Base"}], "required": ["a"],
            "$defs": {"Base": {"properties": {"b": {"type": "integer"}}, "required": ["b"]}}}


def test_allof_member_names_count_as_listed_on_the_parent() -> None:
    closed = close_unlisted(COMPOSED)
    assert closed["additionalProperties"] is False
    assert list(closed["properties"]) == ["a", "b"]
    opened = {**COMPOSED, "allOf": [{"properties": {"b": {}}, "additionalProperties": True}]}
    assert "additionalProperties" not in close_unlisted(opened)  # a member says what else


@settings(max_examples=300, deadline=None)
@given(_OBJECTS)
def test_closing_a_composed_object_never_admits_what_it_refuses(instance: dict[str, Any]) -> None:
    if _valid(close_unlisted(COMPOSED), instance):
        assert _valid(COMPOSED, instance)


def test_llguidance_accepts_the_allof_base_members(llg_compiler) -> None:  # type: ignore[no-untyped-def]
    compiled = llg_compiler.compile(GrammarSpec("json_schema", canonical_json(COMPOSED),
                                                (("strict", False),)))
    assert compiled.backend == "llguidance"
    assert _accepts(compiled, '{"a": 1, "b": 2}')
    for text in ['{"a": 1}', '{"a": 1, "b": 2, "c": 3}', '{"a": 1, "b": "x"}']:
        assert not _accepts(compiled, text), text


# members a condition adds: llguidance ignores if/then/else and dependentSchemas, and the
# parent used to be closed on `kind` / `a` alone, so `x`, `y` and `b` were always refused
CONDITIONAL = {"type": "object", "properties": {"kind": {"type": "string"}},
               "required": ["kind"], "if": {"properties": {"kind": {"const": "a"}}},
               "then": {"properties": {"x": {"type": "integer"}}, "required": ["x"]},
               "else": {"properties": {"x": {"type": "string"}, "y": {"type": "integer"}}},
               "dependentSchemas": {"y": {"properties": {"z": {"type": "boolean"}}}},
               "dependentRequired": {"z": ["w"]}}


def test_conditional_members_are_listed_with_their_schemas() -> None:
    closed = close_unlisted(CONDITIONAL)
    assert closed["properties"] == {
        "kind": {"type": "string"}, "w": True,
        "x": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "y": {"type": "integer"}, "z": {"type": "boolean"}}
    assert "additionalProperties" not in closed["then"]  # members are never closed
    named = {"type": "object", "properties": {"then": {"properties": {"q": {}}}}}
    assert close_unlisted(named)["properties"]["then"]["additionalProperties"] is False
    opened = {**CONDITIONAL, "else": {"additionalProperties": True}}
    assert "additionalProperties" not in close_unlisted(opened)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["kind", "x", "y", "z", "w", "q"]),
                       st.one_of(_VALUES, st.sampled_from(["a", "b"])), max_size=5))
def test_closing_conditional_members_never_admits_what_it_refuses(instance: dict[str, Any]) -> None:
    if _valid(close_unlisted(CONDITIONAL), instance):
        assert _valid(CONDITIONAL, instance)


def test_llguidance_accepts_conditional_members(llg_compiler) -> None:  # type: ignore[no-untyped-def]
    compiled = llg_compiler.compile(GrammarSpec("json_schema", canonical_json(CONDITIONAL),
                                                (("strict", False),)))
    assert compiled.backend == "llguidance"
    for text in ['{"kind": "a", "x": 1}', '{"kind": "b", "x": "s", "y": 2, "z": true, "w": 0}']:
        assert _valid(CONDITIONAL, json.loads(text)) and _accepts(compiled, text), text
    for text in ['{"kind": "a", "x": []}', '{"kind": "b", "q": 1}', '{"kind": "b", "z": 1}']:
        assert not _accepts(compiled, text), text


# a union whose branches do not restate the parent's tag: llguidance merges each branch into
# the parent, and a branch closed on its own names refused the parent's `kind`, so no valid
# instance could be written; (reduced from held-out Github_ultra o358, an Azure linked
# service) `allOf: [{"$ref": base}, {"oneOf": [{"$ref": kind}, …]}]`: the closed branch
# refused base's `description`
TAGGED = {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"],
          "anyOf": [{"$ref": "#/$defs/Cat"},
                    {"properties": {"bark": {"type": "integer"}}, "required": ["bark"]}],
          "$defs": {"Cat": {"properties": {"meow": {"type": "boolean"}}, "required": ["meow"]}}}
LINKED = {"type": "object", "required": ["type"],
          "allOf": [{"$ref": "#/definitions/base"},
                    {"oneOf": [{"$ref": "#/definitions/sql"}, {"$ref": "#/definitions/blob"}]}],
          "definitions": {
              "base": {"type": "object", "properties": {"description": {"type": "string"}}},
              "sql": {"type": "object", "properties": {"type": {"enum": ["Sql"]},
                                                       "conn": {"type": "string"}}},
              "blob": {"type": "object", "properties": {"type": {"enum": ["Blob"]},
                                                        "uri": {"type": "string"}}}}}


def test_a_branch_lists_the_names_it_is_merged_with() -> None:
    closed = close_unlisted(TAGGED)
    assert list(closed["$defs"]["Cat"]["properties"]) == ["meow", "kind"]
    assert list(closed["anyOf"][1]["properties"]) == ["bark", "kind"]
    assert closed["$defs"]["Cat"]["additionalProperties"] is False
    linked = close_unlisted(LINKED)["definitions"]
    assert list(linked["sql"]["properties"]) == ["type", "conn", "description", "uri"]
    assert "additionalProperties" not in linked["base"]  # an allOf member: never closed
    opened = {**TAGGED, "patternProperties": {"^x-": {}}}  # the parent opens: branches too
    assert "additionalProperties" not in close_unlisted(opened)["$defs"]["Cat"]


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["kind", "meow", "bark", "type", "conn", "uri",
                                        "description", "zip"]),
                       st.one_of(_VALUES, st.sampled_from(["Sql", "Blob"])), max_size=5))
def test_closing_merged_branches_never_admits_what_they_refuse(instance: dict[str, Any]) -> None:
    for schema in (TAGGED, LINKED):
        if _valid(close_unlisted(schema), instance):
            assert _valid(schema, instance)


def test_llguidance_accepts_the_parent_names_beside_a_branch(llg_compiler) -> None:  # type: ignore[no-untyped-def]
    for schema, valid, invalid in (
            (TAGGED, ['{"kind": "c", "meow": true}', '{"kind": "d", "bark": 1}'],
             ['{"kind": "c", "meow": true, "zip": 1}', '{"kind": "c"}', '{"meow": true}']),
            (LINKED, ['{"description": "d", "type": "Sql", "conn": "c"}',
                      '{"type": "Blob", "uri": "u"}'],
             ['{"description": 1, "type": "Sql"}', '{"type": "Oracle"}'])):
        compiled = llg_compiler.compile(GrammarSpec("json_schema", canonical_json(schema),
                                                    (("strict", False),)))
        assert compiled.backend == "llguidance"
        for text in valid:
            assert _valid(schema, json.loads(text)) and _accepts(compiled, text), text
        for text in invalid:
            assert not _accepts(compiled, text), text
