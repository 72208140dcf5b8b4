"""JSON objects as parametric llguidance rules (grammars.backends.llguidance.object_rules), through the real
llguidance backend and Qwen tokenizer: every instance accepted is valid (python-jsonschema),
every valid instance is accepted when its listed keys follow the schema's order (any order
under `property_order="any"`), additional properties come anywhere, keys never repeat."""

from __future__ import annotations

import itertools
import json
from typing import Any

import jsonschema
import pytest

from grammars import GrammarCompiler, GrammarSpec
from grammars.backends.llguidance.object_rules import object_rules_grammar
from grammars.spec import canonical_json
from tests.grammars.conftest import QWEN_VOCAB

OPTIONS = {"whitespace_flexible": True, "coerce_one_of": True, "lenient": True}


@pytest.fixture(scope="module")
def any_order_compiler(qwen_tokenizer):  # type: ignore[no-untyped-def]
    return GrammarCompiler(qwen_tokenizer, backend="llguidance", vocab_size=QWEN_VOCAB,
                           property_order="any")


def _compiled(compiler: GrammarCompiler, schema: Any) -> Any:
    return compiler.compile(GrammarSpec("json_schema", canonical_json(schema),
                                        (("strict", False),)))


def _accepts(compiled: Any, text: str) -> bool:
    matcher = compiled.matcher()
    return bool(matcher.accept_text(text) and matcher.can_stop())


# (schema, listed names in schema order, {name: values to try}); every schema says
# `additionalProperties`, so the policy's closing changes nothing and the oracle is the schema
CASES: dict[str, tuple[dict[str, Any], list[str], dict[str, list[Any]]]] = {
    "open": ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
              "required": ["a"], "additionalProperties": True},
             ["a", "b"], {"a": [1, "x"], "b": ["s"], "z": [None]}),
    "groups": ({"type": "object", "additionalProperties": {"type": "integer"},
                "required": ["shape"],
                "properties": {"shape": {"enum": ["c", "r"]}, "radius": {"type": "number"},
                               "w": {"type": "number"}, "h": {"type": "number"}},
                "oneOf": [{"required": ["radius"]}, {"required": ["w", "h"]}]},
               ["shape", "radius", "w", "h"], {"shape": ["c"], "radius": [1], "w": [2], "h": [3],
                                               "z": [0, "s"]}),
    "merged": ({"type": "object", "additionalProperties": True,
                "allOf": [{"$ref": "#/$defs/base"},
                          {"properties": {"kind": {"const": "x"}}, "required": ["kind"]}],
                "$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}},
                                   "required": ["id"]}}},
               ["id", "kind"], {"id": [7, "7"], "kind": ["x", "y"], "z": [[]]}),
    "extra_schema": ({"type": "object", "properties": {"a": {"type": "integer"}},
                      "patternProperties": {"^b_c$": {"type": "boolean"}},
                      "additionalProperties": {"type": "string"}},
                     ["a", "b_c"], {"a": [1], "b_c": [True, "t"], "z": ["s", 2]}),
}


def _instances(pool: dict[str, list[Any]]) -> list[tuple[list[str], dict[str, Any]]]:
    """Every ordering of every set of up to 4 keys, with each combination of values."""
    out = []
    keys = list(pool)
    for size in range(0, min(4, len(keys)) + 1):
        for chosen in itertools.permutations(keys, size):
            for values in itertools.product(*(pool[k] for k in chosen)):
                out.append((list(chosen), dict(zip(chosen, values, strict=True))))
    return out


def _in_schema_order(keys: list[str], listed: list[str]) -> bool:
    ranks = [listed.index(k) for k in keys if k in listed]
    return ranks == sorted(ranks)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("order", ["schema", "any"])
def test_accepts_exactly_the_valid_instances_in_the_order_asked(
        case: str, order: str, llg_compiler: GrammarCompiler,
        any_order_compiler: GrammarCompiler) -> None:
    schema, listed, pool = CASES[case]
    compiled = _compiled(llg_compiler if order == "schema" else any_order_compiler, schema)
    assert compiled.backend == "llguidance"
    validator = jsonschema.Draft202012Validator(schema)
    checked = 0
    for keys, data in _instances(pool):
        text = "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(data[k])}" for k in keys) + "}"
        valid = validator.is_valid(data)
        expected = valid and (order == "any" or _in_schema_order(keys, listed))
        assert _accepts(compiled, text) is expected, (text, valid)
        checked += expected
    assert checked >= 3  # the pools reach accepted instances, not only refusals


def test_additional_properties_anywhere_but_never_a_listed_name_again(
        llg_compiler: GrammarCompiler) -> None:
    schema = CASES["open"][0]
    compiled = _compiled(llg_compiler, schema)
    assert _accepts(compiled, '{"$schema": "x", "a": 1, "q": {"n": [1, 2]}, "b": "s"}')
    assert not _accepts(compiled, '{"a": 1, "a": 2}')  # a repeated listed key
    assert not _accepts(compiled, '{"a": 1, "b": "s", "b": "t"}')
    assert not _accepts(compiled, '{"z": 1, "z2": 2}')  # required a missing
    assert _accepts(compiled, '{ "a": 1,\n "z":null }')  # whitespace between tokens
    assert not _accepts(compiled, '{ "a" : 1 ,\n "z":null }')  # not before , or : (json_layout)
    assert not _accepts(compiled, ' {"a": 1}')  # none before the value (as the JSON compiler)


def test_nested_objects_through_refs_arrays_and_unions(
        any_order_compiler: GrammarCompiler) -> None:
    schema = {"type": "object", "additionalProperties": False,
              "properties": {"nodes": {"type": "array", "maxItems": 2,
                                       "items": {"$ref": "#/$defs/node"}}},
              "$defs": {"node": {"type": "object", "required": ["v"],
                                 "additionalProperties": False,
                                 "properties": {"v": {"type": "integer"},
                                                "next": {"anyOf": [{"$ref": "#/$defs/node"},
                                                                   {"type": "null"}]}}}}}
    compiled = _compiled(any_order_compiler, schema)
    assert _accepts(compiled, '{"nodes": [{"next": {"next": null, "v": 2}, "v": 1}, {"v": 3}]}')
    assert _accepts(compiled, '{"nodes": []}')
    assert not _accepts(compiled, '{"nodes": [{"v": 1}, {"v": 2}, {"v": 3}]}')  # maxItems
    assert not _accepts(compiled, '{"nodes": [{"next": {"next": null}, "v": 1}]}')  # inner v
    assert not _accepts(compiled, '{"nodes": [{"v": 1, "w": 2}]}')  # closed


def test_returns_none_where_the_json_compiler_says_the_same() -> None:
    closed = {"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False}
    assert object_rules_grammar(closed, property_order="schema", json_options=OPTIONS) is None
    assert object_rules_grammar(closed, property_order="any", json_options=OPTIONS) is not None
    one = {"type": "object", "properties": {"a": {}}, "additionalProperties": False}
    assert object_rules_grammar(one, property_order="any", json_options=OPTIONS) is None
    # keywords these rules do not read leave the object to the JSON compiler
    for extra in ({"minProperties": 1}, {"patternProperties": {"^x.*$": {}}},
                  {"enum": [{"a": 1}]}):
        unread = {"type": "object", "properties": {"a": {}}, "additionalProperties": True,
                  **extra}
        assert object_rules_grammar(unread, property_order="any", json_options=OPTIONS) is None
    with pytest.raises(ValueError, match="property_order"):
        object_rules_grammar(closed, property_order="sorted", json_options=OPTIONS)  # type: ignore[arg-type]


def test_leaves_carry_only_the_definitions_they_reach() -> None:
    schema = {"type": "object", "additionalProperties": True,
              "properties": {"a": {"$ref": "#/definitions/A"}},
              "definitions": {"A": {"type": "string", "pattern": "^x"},
                              "B": {"type": "integer", "description": "unreached"}}}
    grammar = object_rules_grammar(schema, property_order="schema", json_options=OPTIONS)
    assert grammar is not None
    assert '"pattern": "^x"' in grammar and "unreached" not in grammar


def test_property_order_is_an_option_of_the_compiler_and_its_cache_key(
        qwen_tokenizer, llg_compiler: GrammarCompiler,  # type: ignore[no-untyped-def]
        any_order_compiler: GrammarCompiler) -> None:
    with pytest.raises(ValueError, match="property_order"):
        GrammarCompiler(qwen_tokenizer, backend="llguidance", property_order="sorted")  # type: ignore[arg-type]
    schema = {"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False}
    spec = GrammarSpec("json_schema", canonical_json(schema), (("strict", False),))
    assert llg_compiler._key(spec) != any_order_compiler._key(spec)
    assert not _accepts(_compiled(llg_compiler, schema), '{"b": 1, "a": 2}')
    assert _accepts(_compiled(any_order_compiler, schema), '{"b": 1, "a": 2}')


@pytest.mark.parametrize("schema, text, ok", [
    # JSON Schema compares numbers by value: 1.0 is the constant 1.0 however it is spelled
    ({"allOf": [{"enum": [{"a": 1.0}]}, {"not": {"enum": [{"a": True}]}}]}, '{"a": 1.0}', True),
    ({"allOf": [{"enum": [{"a": 1.0}]}, {"not": {"enum": [{"a": True}]}}]}, '{"a": 1}', True),
    ({"allOf": [{"enum": [{"a": 1.0}]}, {"not": {"enum": [{"a": True}]}}]}, '{"a":1e0}', True),
    ({"allOf": [{"enum": [{"a": 1.0}]}, {"not": {"enum": [{"a": True}]}}]}, '{"a": 10}', False),
    ({"allOf": [{"enum": [{"a": 1.0}]}, {"not": {"enum": [{"a": True}]}}]}, '{"a": true}', False),
    ({"const": -2.5}, "-2.50", True),
    ({"const": -2.5}, "2.5", False),
    ({"const": -2.5}, "-2.55", False),
    ({"const": 1e-07}, "1e-07", True),
    ({"const": 1e-07}, "0.0000001", True),
    ({"type": "integer", "enum": [1.0, 2.5, "s"]}, "1", True),
    ({"type": "integer", "enum": [1.0, 2.5, "s"]}, "2.5", False),  # not an integer
    ({"type": "integer", "enum": [1.0, 2.5, "s"]}, '"s"', False),
    ({"enum": [[1, {"b": None}], "x"]}, '[1.0, {"b": null}]', True),
])
def test_number_constants_in_every_spelling_of_their_value(
        schema: Any, text: str, ok: bool, llg_compiler: GrammarCompiler) -> None:
    assert object_rules_grammar(schema, property_order="schema", json_options=OPTIONS)
    assert _accepts(_compiled(llg_compiler, schema), text) is ok
    if ok:
        assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))


def test_a_member_no_value_satisfies_is_left_out_not_the_whole_grammar(
        any_order_compiler: GrammarCompiler) -> None:
    # `a` can never be written (an object that must be one of some strings); the JSON compiler
    # leaves such a member out, and so do the rules, instead of refusing the whole schema
    schema = {"type": "object", "additionalProperties": False,
              "properties": {"a": {"type": "object", "enum": ["x"]}, "b": {}, "c": {}}}
    compiled = _compiled(any_order_compiler, schema)
    assert "_tail::" in compiled._handle.grammar  # the rules, not the JSON compiler's grammar
    assert _accepts(compiled, '{"c": 2, "b": 1}')
    assert not _accepts(compiled, '{"a": "x"}')
    required = {**schema, "required": ["a"]}
    assert not _accepts(_compiled(any_order_compiler, required), '{"b": 1}')


CLOSED_GROUPS = {**CASES["groups"][0], "additionalProperties": False}
CLOSED = {"type": "object", "additionalProperties": False, "required": ["b"],
          "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                         "c": {"type": "integer"}}}
# (schema, one valid value per key; "z" is a key no schema lists)
PREFIX_CASES = {
    "open": (CASES["open"][0], {"a": 1, "b": "s", "z": None}),
    "groups": (CASES["groups"][0], {"shape": "c", "radius": 1, "w": 2, "h": 3, "z": 0}),
    "merged": (CASES["merged"][0], {"id": 7, "kind": "x", "z": []}),
    "extra_schema": (CASES["extra_schema"][0], {"a": 1, "b_c": True, "z": "s"}),
    "closed": (CLOSED, {"a": 1, "b": 2, "c": 3, "z": 4}),
    "closed_groups": (CLOSED_GROUPS, {"shape": "c", "radius": 1, "w": 2, "h": 3, "z": 0}),
}


@pytest.mark.parametrize("case", list(PREFIX_CASES))
@pytest.mark.parametrize("order", ["schema", "any"])
def test_every_accepted_prefix_can_still_be_completed(
        case: str, order: str, llg_compiler: GrammarCompiler,
        any_order_compiler: GrammarCompiler) -> None:
    """No dead end: a mask never allows a member after which the object cannot close (a key
    the schema order places after a required one not yet written, a `oneOf` branch completed
    besides another) nor a comma no member may follow. Every sequence of members the grammar
    accepts as a prefix extends to a sequence it accepts whole."""
    schema, values = PREFIX_CASES[case]
    compiled = _compiled(llg_compiler if order == "schema" else any_order_compiler, schema)
    closed = schema["additionalProperties"] is False
    sequences = [list(p) for size in range(len(values) + 1)
                 for p in itertools.permutations(values, size)]

    def text(keys: list[str]) -> str:
        return "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(values[k])}" for k in keys)

    complete = {tuple(k) for k in sequences if _accepts(compiled, text(k) + "}")}
    assert complete
    for keys in sequences:
        extensions = [c for c in complete if c[: len(keys)] == tuple(keys)]
        if compiled.matcher().accept_text(text(keys)):
            assert extensions, f"dead end after {text(keys)!r}"
        if closed and keys and compiled.matcher().accept_text(text(keys) + ","):
            assert any(len(c) > len(keys) for c in extensions), \
                f"dead end after the comma in {text(keys)!r},"
