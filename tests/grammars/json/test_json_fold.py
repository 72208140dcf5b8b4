"""grammars.json.fold: allOf / anyOf / oneOf folded so xgrammar compiles what the schema says.

Exactness is checked with python-jsonschema (folded and original schema give the same verdict
on fixed and generated instances, `oneOf` read as `anyOf`), and on the xgrammar backend,
which compiled each of these shapes to any JSON value before the fold.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammars import GrammarSpec
from grammars.json.fold import MAX_BRANCHES, fold_combinators
from grammars.spec import canonical_json

_PROPS = {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "number"}}
SHAPES: dict[str, dict[str, Any]] = {
    # an object with properties and a choice of required sets (calculate_area, WashingtonPost)
    "anyOf required": {"type": "object", "properties": _PROPS,
                       "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
    "oneOf required": {"type": "object", "properties": _PROPS,
                       "oneOf": [{"required": ["a"]}, {"required": ["b", "c"]}]},
    # allOf [required, oneOf [required…]] beside additionalProperties: false (o6184)
    "allOf nested oneOf": {"type": "object", "properties": _PROPS, "additionalProperties": False,
                           "allOf": [{"required": ["a"]},
                                     {"oneOf": [{"required": ["b"]}, {"required": ["c"]}]}]},
    # a composed object: base through $ref plus own members
    "allOf ref": {"$defs": {"base": {"type": "object", "properties": {"a": {"type": "string"}},
                                     "required": ["a"]}},
                  "allOf": [{"$ref": "#/$defs/base"},
                            {"properties": {"b": {"type": "integer", "minimum": 2}}}]},
    # a discriminated union of $ref branches beside the tag
    "ref branches": {"$defs": {"cat": {"properties": {"kind": {"const": "cat"},
                                                      "meow": {"type": "integer"}},
                                       "required": ["kind", "meow"]},
                               "dog": {"properties": {"kind": {"const": "dog"},
                                                      "bark": {"type": "string"}},
                                       "required": ["kind"]}},
                     "type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}},
                     "required": ["kind"],
                     "oneOf": [{"$ref": "#/$defs/cat"}, {"$ref": "#/$defs/dog"}]},
    # a scalar with its own keywords beside the branches; one branch type-incompatible
    "string anyOf": {"type": "string", "maxLength": 4,
                     "anyOf": [{"pattern": "^z"}, {"minLength": 3}, {"type": "null"}]},
    "number bounds": {"type": "number", "minimum": 0,
                      "allOf": [{"maximum": 10}, {"type": "integer", "minimum": 2}]},
    "enum meets const": {"enum": [1, "x", None], "allOf": [{"const": 1.0}, {"type": "number"}]},
}
INSTANCES: list[Any] = [
    None, 0, 1, 2.5, 7, 12, -1, "", "x", "zz", "abc", "zzzzz", [], [1],
    {}, {"a": "x"}, {"b": 1}, {"a": 1}, {"c": 1.5}, {"a": "x", "b": 1}, {"b": 1, "c": 2},
    {"a": "x", "c": 2}, {"zzz": 1}, {"a": "x", "zzz": 1}, {"a": "x", "b": 1, "c": 0},
    {"kind": "cat", "meow": 1}, {"kind": "cat"}, {"kind": "dog"}, {"kind": "dog", "bark": "w"},
    {"kind": "cat", "bark": "w"}, {"kind": "fox"}, {"a": "x", "b": 1.5}, {"b": 2},
]


def _as_anyof(schema: Any) -> Any:
    """`schema` with every `oneOf` read as `anyOf` (grammars.json.policy rule 2)."""
    text = json.dumps(schema).replace('"oneOf"', '"anyOf"')
    return json.loads(text)


def _agree(schema: dict[str, Any], instance: Any) -> tuple[bool, bool]:
    original = jsonschema.Draft202012Validator(_as_anyof(schema))
    folded = jsonschema.Draft202012Validator(fold_combinators(schema))
    return original.is_valid(instance), folded.is_valid(instance)


@pytest.mark.parametrize("name", list(SHAPES))
def test_folding_keeps_every_verdict(name: str) -> None:
    schema = SHAPES[name]
    for instance in INSTANCES:
        want, got = _agree(schema, instance)
        assert want == got, (name, instance)


@pytest.mark.parametrize("name", list(SHAPES))
def test_folded_shapes_have_no_combinator_beside_other_keywords(name: str) -> None:
    folded = fold_combinators(SHAPES[name])
    assert "allOf" not in folded and "oneOf" not in folded
    if "anyOf" in folded:
        assert set(folded) <= {"anyOf", "$defs", "definitions", "$schema", "title",
                               "description"}, folded


def test_required_branches_become_whole_objects() -> None:
    folded = fold_combinators(SHAPES["anyOf required"])
    assert folded == {"anyOf": [
        {"type": "object", "properties": _PROPS, "required": ["a"]},
        {"type": "object", "properties": _PROPS, "required": ["b"]},
    ]}


def test_an_unsatisfiable_branch_is_dropped() -> None:
    folded = fold_combinators(SHAPES["string anyOf"])
    assert [branch.get("type") for branch in folded["anyOf"]] == ["string", "string"]


def test_the_input_is_not_modified() -> None:
    schema = json.loads(json.dumps(SHAPES["allOf nested oneOf"]))
    fold_combinators(schema)
    assert schema == SHAPES["allOf nested oneOf"]


@pytest.mark.parametrize("schema", [
    # conflicting patterns: no exact single-schema form
    {"type": "string", "allOf": [{"pattern": "^a"}, {"pattern": "b$"}]},
    # patternProperties on a side
    {"type": "object", "properties": {"a": {}}, "anyOf": [{"patternProperties": {"^x": {}}}]},
    # a $ref into a combinator member
    {"allOf": [{"type": "object"}, {"required": ["a"]}],
     "properties": {"x": {"$ref": "#/allOf/0"}}},
    # a $ref into the properties that folding moves into the branches
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"$ref": "#/properties/a"}},
     "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
    # more branches than MAX_BRANCHES
    {"type": "object",
     "anyOf": [{"required": [f"a{i}"]} for i in range(MAX_BRANCHES // 4 + 1)],
     "oneOf": [{"required": [f"b{i}"]} for i in range(5)]},
])
def test_what_cannot_be_folded_exactly_is_left_as_written(schema: dict[str, Any]) -> None:
    assert fold_combinators(schema) == schema
    for instance in INSTANCES:
        want, got = _agree(schema, instance)
        assert want == got, instance


def test_refs_into_definitions_beside_a_combinator_still_fold() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/definitions/s"}},
              "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
              "definitions": {"s": {"type": "string"}}}
    folded = fold_combinators(schema)
    assert set(folded) == {"anyOf", "definitions"}
    for instance in INSTANCES:
        want, got = _agree(schema, instance)
        assert want == got, instance


def test_a_member_cycle_is_left_as_written() -> None:
    """A `$ref` member that leads back to itself (no validator can check it either)."""
    schema = {"$defs": {"n": {"allOf": [{"$ref": "#/$defs/n"}, {"required": ["a"]}]}},
              "$ref": "#/$defs/n"}
    assert fold_combinators(schema) == schema


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 12),
                    st.floats(-1, 11, allow_nan=False), st.sampled_from(["", "x", "zzz"]))
_OBJECTS = st.dictionaries(st.sampled_from(["a", "b", "c", "kind", "meow", "bark", "zzz"]),
                           st.one_of(_VALUES, st.sampled_from(["cat", "dog"])), max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_VALUES, _OBJECTS), st.sampled_from(list(SHAPES)))
def test_folding_never_changes_a_verdict(instance: Any, name: str) -> None:
    want, got = _agree(SHAPES[name], instance)
    assert want == got


@pytest.mark.parametrize("strict", [False, True])
def test_xgrammar_enforces_the_folded_object(xgr_compiler, strict: bool) -> None:  # type: ignore[no-untyped-def]
    """Before the fold each of these compiled to any JSON value on xgrammar 0.2.8."""
    for name in ("anyOf required", "oneOf required", "allOf nested oneOf", "allOf ref",
                 "ref branches"):
        schema = SHAPES[name]
        compiled = xgr_compiler.compile(
            GrammarSpec("json_schema", canonical_json(schema), (("strict", strict),)))
        validator = jsonschema.Draft202012Validator(_as_anyof(schema))
        for instance in INSTANCES:
            matcher = compiled.matcher()
            got = bool(matcher.accept_text(json.dumps(instance)) and matcher.can_stop())
            # the grammar may refuse more (listed properties only, fixed order), never admit more
            assert not got or validator.is_valid(instance), (name, instance)
        for text in ("null", "[[1]]", '{"zzz": 1}', "{}"):
            matcher = compiled.matcher()
            assert not (matcher.accept_text(text) and matcher.can_stop()), (name, text)


def test_xgrammar_accepts_each_branch(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    cases = {"anyOf required": ['{"a": "x"}', '{"b": 1}', '{"a": "x", "b": 1}'],
             "allOf nested oneOf": ['{"a": "x", "b": 1}', '{"a": "x", "c": 1.5}'],
             "allOf ref": ['{"a": "x"}', '{"a": "x", "b": 3}'],
             "ref branches": ['{"kind": "cat", "meow": 1}', '{"kind": "dog", "bark": "w"}']}
    for name, texts in cases.items():
        compiled = xgr_compiler.compile(
            GrammarSpec("json_schema", canonical_json(SHAPES[name]), (("strict", False),)))
        for text in texts:
            matcher = compiled.matcher()
            assert matcher.accept_text(text) and matcher.can_stop(), (name, text)


def test_a_property_given_as_ref_on_one_side_merges_with_its_target() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/s"}},
              "allOf": [{"properties": {"a": {"maxLength": 2}}, "required": ["a"]}],
              "$defs": {"s": {"type": "string"}}}
    folded = fold_combinators(schema)
    assert folded["properties"]["a"] == {"type": "string", "maxLength": 2}
    for instance in [*INSTANCES, {"a": "abc"}, {"a": "ab"}]:
        want, got = _agree(schema, instance)
        assert want == got, instance


def test_two_recursive_schemas_merge_without_recursing_forever() -> None:
    schema = {"$defs": {"node": {"type": "object",
                                 "properties": {"kid": {"$ref": "#/$defs/node"}}},
                        "tagged": {"type": "object",
                                   "properties": {"kid": {"$ref": "#/$defs/tagged"},
                                                  "tag": {"type": "string"}}}},
              "allOf": [{"$ref": "#/$defs/node"}, {"$ref": "#/$defs/tagged"}]}
    fold_combinators(schema)  # returns (folded as far as MAX_DEPTH allows, or as written)
    for instance in [{}, {"kid": {"kid": {"tag": "x"}}}, {"kid": {"tag": 1}}, {"tag": "x"}]:
        want, got = _agree(schema, instance)
        assert want == got, instance


def test_a_nested_id_is_left_as_written() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}},
              "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
              "definitions": {"x": {"id": "http://example.com/x", "type": "string"}}}
    assert fold_combinators(schema) == schema


def test_folding_changes_no_verdict_on_the_public_split(data_dir) -> None:  # type: ignore[no-untyped-def]
    """Every JSONSchemaBench schema of the public split the fold changes, on its own test
    instances: python-jsonschema (formats checked) gives the folded schema the same verdict."""
    folded_n = instances = 0
    for path in sorted((data_dir / "jsonschemabench").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            schema = record["schema"]
            folded = fold_combinators(schema)
            if folded == schema:
                continue
            folded_n += 1
            cls = jsonschema.validators.validator_for(schema)
            original = cls(_as_anyof(schema), format_checker=cls.FORMAT_CHECKER)
            after = cls(_as_anyof(folded), format_checker=cls.FORMAT_CHECKER)
            for test in record.get("tests", []):
                instances += 1
                assert original.is_valid(test["data"]) == after.is_valid(test["data"]), (
                    record["id"], test["data"])
    assert folded_n >= 30 and instances >= 100, (folded_n, instances)  # measured 34, 126
