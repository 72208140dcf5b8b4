"""Keywords beside a `$ref` resolved before llguidance (grammars.backends.llguidance.ref_siblings): what is
rewritten and what is left, that every rewrite admits exactly what the schema admits
(python-jsonschema on fixed and random instances), and, through the real llguidance backend
and Qwen tokenizer, that a recursive schema llguidance used to refuse now compiles and
accepts exactly the instances the schema allows."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import jsonschema
import pytest

import grammars.backends.llguidance.backend as llguidance_backend
from grammars import GrammarCompiler, GrammarError, GrammarSpec
from grammars.backends.llguidance.ref_siblings import _other_than, resolve_ref_siblings
from grammars.json.fold import conjunction
from tests.grammars.json.test_json_fold import INSTANCES as FOLD_INSTANCES
from tests.grammars.json.test_json_fold import SHAPES, _as_anyof

CLOSED = {"additionalProperties": False}


def _agree(schema: Any, rewritten: Any, instances: list[Any]) -> None:
    for instance in instances:
        expected = jsonschema.Draft202012Validator(schema).is_valid(instance)
        assert jsonschema.Draft202012Validator(rewritten).is_valid(instance) == expected, instance


@pytest.mark.parametrize("names", [["basic"], ["by", "photos_by", "b"], ["", "a-b", "x]^\\"],
                                   ["é", "a.b", "(x)"]])
def test_other_than_matches_every_string_but_the_names(names: list[str]) -> None:
    regex = re.compile(_other_than(names))
    rng = random.Random(7)
    alphabet = "".join(sorted(set("".join(names)))) + "zZ \n"
    candidates = {*names, *(name[:cut] for name in names for cut in range(len(name))),
                  *(name + extra for name in names for extra in ("x", "\n", "_"))}
    candidates |= {"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
                   for _ in range(3000)}
    for text in candidates:
        assert bool(regex.search(text)) == (text not in names), text


def test_llguidance_reads_the_complement_as_python_does(llg_compiler: GrammarCompiler) -> None:
    schema = {"type": "object", "patternProperties": {_other_than(["by", "b-y"]): {
        "type": "integer"}}, "additionalProperties": False}
    compiled = llg_compiler.compile(GrammarSpec("json_schema", json.dumps(schema)))
    for key, allowed in (("by", False), ("b-y", False), ("b", True), ("byy", True),
                         ("", True), ("x]", True)):
        matcher = compiled.matcher()
        text = json.dumps({key: 1})
        assert bool(matcher.accept_text(text) and matcher.can_stop()) == allowed, key


DEFS = {
    "node": {"type": "object", "properties": {"name": {"type": "string"},
                                              "kids": {"type": "array", "items": {
                                                  "$ref": "#/$defs/node"}}}, **CLOSED},
    "leaf": {"type": "object", "properties": {"id": {"type": "integer"}},
             "required": ["id"], **CLOSED},
    "word": {"type": "string"},
}
NODE, LEAF = {"$ref": "#/$defs/node"}, {"$ref": "#/$defs/leaf"}
OBJECTS = [{}, {"name": "a"}, {"id": 1}, {"id": "x"}, {"name": 1}, {"kids": [{"name": "b"}]},
           {"kids": [{"id": 1}]}, 3, "s", None, [], {"id": 1, "name": "a"}]


@pytest.mark.parametrize(("schema", "dropped"), [
    ({"type": "object", "anyOf": [NODE, LEAF]}, True),
    ({"type": "object", "additionalProperties": True, "anyOf": [NODE, LEAF]}, True),
    ({"type": "object", "additionalProperties": True, "allOf": [LEAF]}, False),
    ({"type": "object", "oneOf": [NODE, {"$ref": "#/$defs/leaf", "title": "t"}]}, True),
    ({"type": ["object", "null"], "anyOf": [NODE, LEAF]}, True),
    ({"type": "object", **NODE}, True),
    ({"type": "object", "allOf": [{"required": ["id"]}, LEAF]}, False),  # object rules read it
    ({"type": "object", "anyOf": [NODE, {"required": ["id"]}]}, False),  # a branch untyped
    ({"type": "object", "anyOf": [NODE, {"$ref": "#/$defs/word"}]}, False),  # not within
    ({"type": "array", "anyOf": [NODE]}, False),
    ({"type": "number", "anyOf": [{"type": "integer"}, {"type": "number"}]}, True),
    ({"type": "integer", "anyOf": [{"type": "number"}]}, False),  # 1.5 is a number
])
def test_what_constrains_nothing_beside_a_ref_or_branches_is_dropped(schema: dict[str, Any], dropped: bool) -> None:
    schema = {**schema, "$defs": DEFS}
    out = resolve_ref_siblings(schema)
    assert ("type" not in out) == dropped
    if "additionalProperties" in schema:  # `true`: a no-op, kept beside `allOf` only
        assert ("additionalProperties" in out) == ("allOf" in schema)
    _agree(schema, out, [*OBJECTS, 1.5, 2, "x"])


def test_a_listed_name_a_match_everything_pattern_also_covers_gets_the_conjunction() -> None:
    related = {"type": "object",
               "properties": {"redirect": {"type": "array", "items": LEAF, "maxItems": 1},
                              "name": {"type": "string"}},
               "patternProperties": {".*": {"type": "array", "items": {
                   "anyOf": [NODE, LEAF], "type": "object"}}}}
    schema = {**related, "$defs": DEFS}
    out = resolve_ref_siblings(schema)
    (pattern,) = out["patternProperties"]
    assert not re.search(pattern, "redirect") and not re.search(pattern, "name")
    assert re.search(pattern, "other") and re.search(pattern, "redirects")
    assert out["properties"]["redirect"]["items"]["required"] == ["id"]  # the leaf, inlined
    assert out["properties"]["name"] is False  # a string and an array: nothing
    _agree(schema, out, [
        {"redirect": [{"id": 1}]}, {"redirect": [{"id": 1}, {"id": 2}]}, {"redirect": [{}]},
        {"redirect": [{"name": "a"}]}, {"redirect": []}, {"other": [{"name": "a"}, {"id": 2}]},
        {"other": [1]}, {"name": "a"}, {"name": []}, {"name": [{"id": 1}]}, {"redirects": []}])


def test_equal_schemas_under_a_narrower_pattern_leave_the_listed_one_empty() -> None:
    labels = {"type": "object", "required": ["text"],
              "properties": {"text": {"type": "string"}, "more": NODE}}
    schema = {"type": "object", "properties": {"basic": {**labels, "description": "default"}},
              "patternProperties": {"^[a-z_]*$": {**labels, "title": "others"}},
              "$defs": DEFS}
    out = resolve_ref_siblings(schema)
    assert out["properties"]["basic"] == {}
    assert list(out["patternProperties"]) == ["^[a-z_]*$"]
    _agree(schema, out, [{"basic": {"text": "a"}}, {"basic": {}}, {"basic": {"text": 1}},
                         {"basic": {"text": "a", "more": {"kids": [{"id": 1}]}}},
                         {"other": {"text": "b"}}, {"other": {}}])


@pytest.mark.parametrize("schema", [
    # differing schemas under a pattern that does not match everything
    {"properties": {"a": {"type": "integer"}}, "patternProperties": {"^a$|^b$": {
        "minimum": 0}}, "$defs": DEFS},
    # a backslash: Python and llguidance might read it differently
    {"properties": {"a1": NODE}, "patternProperties": {"^a\\d$": NODE}, "$defs": DEFS},
    # a name with a character `.` reads differently in Python and llguidance
    {"properties": {"a\rb": NODE}, "patternProperties": {"^a.b$": NODE}, "$defs": DEFS},
    # a pattern Python does not read
    {"properties": {"a": NODE}, "patternProperties": {"\\p{L}": {"type": "string"}},
     "$defs": DEFS},
    # two patterns match the name
    {"properties": {"ab": NODE}, "patternProperties": {"a": LEAF, "b": LEAF}, "$defs": DEFS},
    # a `$ref` points into the object's members
    {"properties": {"a": NODE, "b": {"$ref": "#/properties/a"}},
     "patternProperties": {".*": {"type": "object"}}, "$defs": DEFS},
    # a nested base URI
    {"properties": {"a": {"$id": "https://x.example/a", "type": "object"}},
     "patternProperties": {".*": LEAF}, "$defs": DEFS},
])
def test_left_as_written_where_the_rewrite_is_not_known_exact(schema: dict[str, Any]) -> None:
    out = resolve_ref_siblings(schema)
    assert out["properties"] == schema["properties"]
    assert out["patternProperties"] == schema["patternProperties"]


def test_the_input_is_not_modified() -> None:
    schema = {"type": "object", "anyOf": [NODE], "$defs": DEFS}
    before = json.dumps(schema)
    resolve_ref_siblings(schema)
    assert json.dumps(schema) == before


def test_a_schema_with_nothing_to_resolve_comes_back_equal() -> None:
    for schema in ({"type": "object", "properties": {"a": {"$ref": "#/definitions/a"}},
                    "definitions": {"a": {"type": "string"}}},
                   {"type": "object", "properties": {"a": {"type": "string"},
                                                     "b": {"$ref": "#/properties/a"}}}):
        assert resolve_ref_siblings(schema) == schema  # no empty `$defs` either


def test_conjunction_keeps_both_sides_or_gives_up() -> None:
    root: dict[str, Any] = {"$defs": DEFS}
    assert conjunction(root, {"type": "object", "not": {"required": ["a"]}},
                       {"type": "object", "not": {"required": ["b"]}}) is None
    assert conjunction(root, {"type": "object", "unevaluatedProperties": False},
                       {"properties": {"a": {}}}) is None
    assert conjunction(root, {"type": "integer"}, {"type": "string"}) is False  # nothing fits
    assert conjunction(root, LEAF, {"type": "object", "not": {"required": ["b"]}}) == {
        **DEFS["leaf"], "not": {"required": ["b"]}}


# a WashingtonPost-shaped recursive schema: once closed (grammars.backends.llguidance.closure), llguidance
# refused it ("circular references with sibling keys"), so auto fell back to xgrammar (20-23 s
# for the real ones)
CONTENT = {
    "$ref": "#/definitions/content",
    "definitions": {
        "content": {"type": "object", "properties": {
            "title": {"type": "string"},
            "related": {"$ref": "#/definitions/related"},
            "promo": {"$ref": "#/definitions/promo"}}, **CLOSED},
        "redirect": {"type": "object", "properties": {
            "type": {"enum": ["redirect"]}, "url": {"type": "string"}},
            "required": ["type", "url"], **CLOSED},
        "related": {"type": "object", "properties": {"redirect": {
            "type": "array", "items": {"$ref": "#/definitions/redirect"}, "maxItems": 1},
            "count": {"type": "integer"}},
            "patternProperties": {".*": {"type": "array", "items": {"anyOf": [
                {"$ref": "#/definitions/content"}, {"$ref": "#/definitions/redirect"}],
                "type": "object"}}}},
        "promo": {"type": "object",
                  "properties": {"basic": {"oneOf": [{"$ref": "#/definitions/content"}],
                                           "description": "the default"}},
                  "patternProperties": {"^[a-z_]*$": {"oneOf": [
                      {"$ref": "#/definitions/content"}]}}, **CLOSED},
    },
}
REDIRECT = {"type": "redirect", "url": "u"}
INSTANCES = [
    {"title": "a"},
    {"title": "a", "related": {"redirect": [REDIRECT], "more": [{"title": "b"}, REDIRECT]}},
    {"related": {"redirect": [REDIRECT, REDIRECT]}},
    {"related": {"redirect": [{"title": "b"}]}},
    {"related": {"redirect": [{**REDIRECT, "title": "b"}]}},
    {"related": {"more": [{"title": 1}]}},
    {"related": {"count": 1}},
    {"related": {"count": []}},
    {"related": {"more": [{"related": {"redirect": [REDIRECT]}}]}},
    {"related": {"more": [{"related": {"redirect": [{"title": "c"}]}}]}},
    {"promo": {"basic": {"title": "c"}, "extra": {"title": "d"}}},
    {"promo": {"basic": {"title": 5}}},
    {"promo": {"basic": {"promo": {"basic": {"title": "e"}}}}},
    {"promo": {"basic": REDIRECT}},
]


def test_a_recursive_schema_with_ref_siblings_compiles_and_is_exact(
        llg_compiler: GrammarCompiler, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = GrammarSpec("json_schema", json.dumps(CONTENT))
    with monkeypatch.context() as patch:  # before: the closed schema went to llguidance as is
        patch.setattr(llguidance_backend, "resolve_ref_siblings", lambda schema: schema)
        with pytest.raises(GrammarError, match="circular references with sibling keys"):
            llg_compiler._get_backend("llguidance").compile(spec)
    compiled = llg_compiler.compile(spec)
    oracle = jsonschema.Draft202012Validator(CONTENT)
    verdicts = []
    for instance in INSTANCES:
        matcher = compiled.matcher()
        accepted = bool(matcher.accept_text(json.dumps(instance)) and matcher.can_stop())
        assert accepted == oracle.is_valid(instance), instance
        verdicts.append(accepted)
    assert any(verdicts) and not all(verdicts)


# conjunction: exact wherever it answers (python-jsonschema, `oneOf` read as `anyOf`)
_EXTRA_SHAPES: dict[str, Any] = {
    "not a": {"not": {"required": ["a"]}},
    "not b": {"type": "object", "not": {"required": ["b"]}},
    "dependent": {"dependentRequired": {"a": ["b"]}},
    "unevaluated": {"properties": {"a": {}}, "unevaluatedProperties": False},
    "closed": {"type": "object", "properties": {"a": {"type": "string"}, "kind": {}},
               "additionalProperties": False},
    "leaf": LEAF,
}
_SHAPES = {**SHAPES, **_EXTRA_SHAPES}
INSTANCES_BOTH = [*FOLD_INSTANCES, {"a": "x", "kind": "cat"}, {"id": 1}, {"id": 1, "a": "x"},
                  {"b": 1, "a": "x", "c": 1}]
_ROOT = {"$defs": {**DEFS, **{name: sub for shape in SHAPES.values()
                              for name, sub in shape.get("$defs", {}).items()}}}


def _without_defs(schema: Any) -> Any:
    return {key: value for key, value in schema.items() if key != "$defs"}


@pytest.mark.parametrize("first", list(_SHAPES))
def test_a_conjunction_admits_exactly_what_both_sides_admit(first: str) -> None:
    answered = 0
    for second in _SHAPES:
        a, b = _without_defs(_SHAPES[first]), _without_defs(_SHAPES[second])
        merged = conjunction(_ROOT, a, b)
        if merged is None:
            continue
        answered += 1
        validators = [jsonschema.Draft202012Validator(_as_anyof({**_ROOT, "allOf": [schema]}))
                      for schema in (merged, a, b)]
        for instance in INSTANCES_BOTH:
            both, first_side, second_side = (v.is_valid(instance) for v in validators)
            assert both == (first_side and second_side), (second, merged, instance)
    assert answered


# a `$ref` with a sibling its target does not imply, recursive (Github_ultra o39449's
# `{"type": "object", "$ref": "#/definitions/ServiceSpecification"}`, whose target has no type)
SPEC = {"$defs": {"spec": {"required": ["id"], "properties": {
    "id": {"type": "string"},
    "parts": {"type": "array", "items": {"type": "object", "$ref": "#/$defs/spec"}}},
    **CLOSED}}, "type": "object", "$ref": "#/$defs/spec"}
SPEC_INSTANCES = [{"id": "a"}, {"id": "a", "parts": [{"id": "b"}]}, {"id": "a", "parts": [
    {"id": "b", "parts": [{"id": 1}]}]}, {"parts": []}, {"id": "a", "parts": ["x"]},
    {"id": "a", "x": 1}]


def test_a_ref_beside_keywords_becomes_a_ref_to_their_conjunction() -> None:
    out = resolve_ref_siblings(SPEC)
    assert set(out) == {"$defs", "$ref"}  # the root keeps its definitions
    defined = out["$defs"][out["$ref"].rsplit("/", 1)[1]]
    assert defined["type"] == "object" and defined["required"] == ["id"]
    assert defined["properties"]["parts"]["items"] == {"$ref": out["$ref"]}  # recursion closed
    _agree(SPEC, out, [*SPEC_INSTANCES, "x", 1, None])


def test_a_recursive_ref_beside_keywords_compiles_and_is_exact(
        llg_compiler: GrammarCompiler, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = GrammarSpec("json_schema", json.dumps(SPEC))
    with monkeypatch.context() as patch:
        patch.setattr(llguidance_backend, "resolve_ref_siblings", lambda schema: schema)
        with pytest.raises(GrammarError, match="circular references with sibling keys"):
            llg_compiler._get_backend("llguidance").compile(spec)
    compiled = llg_compiler.compile(spec)
    oracle = jsonschema.Draft202012Validator(SPEC)
    for instance in SPEC_INSTANCES:
        matcher = compiled.matcher()
        accepted = bool(matcher.accept_text(json.dumps(instance)) and matcher.can_stop())
        assert accepted == oracle.is_valid(instance), instance


def test_a_root_base_uri_stays_at_the_root(llg_compiler: GrammarCompiler) -> None:
    """A draft-4 `id` beside a root `$ref` is the document's base URI, not a keyword to
    conjoin: moved into a definition it would re-base that definition's `$ref`s
    (JsonSchemaStore's kustomization schema)."""
    schema = {"id": "https://example.com/k.json", "$schema": "http://json-schema.org/draft-04/schema#",
              "$ref": "#/definitions/k", "definitions": {
                  "k": {"type": "object", "properties": {"a": {"$ref": "#/definitions/a"}}},
                  "a": {"type": "string"}}}
    assert resolve_ref_siblings(schema) == schema
    compiled = llg_compiler.compile(GrammarSpec("json_schema", json.dumps(schema)))
    for text, allowed in (('{"a": "x"}', True), ('{"a": 1}', False)):
        matcher = compiled.matcher()
        assert bool(matcher.accept_text(text) and matcher.can_stop()) == allowed, text
