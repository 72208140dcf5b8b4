"""Search-pattern strings and their sliceable twins (grammars.backends.llguidance.search_strings): which
patterns get one, that a twin admits only what its pattern admits, and, through the real
llguidance backend and Qwen tokenizer, that the grammar with twins masks exactly as the JSON
compiler's grammar does at every position (valid and invalid text alike)."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import jsonschema
import llguidance
import pytest
import torch

import grammars.backends.llguidance.object_rules as json_object_rules
from grammars import GrammarCompiler, GrammarSpec
from grammars.backends.llguidance.object_rules import object_rules_grammar
from grammars.backends.llguidance.search_strings import sliceable_twin
from grammars.spec import canonical_json

OPTIONS = {"whitespace_flexible": True, "coerce_one_of": True, "lenient": True}


@pytest.mark.parametrize(("schema", "twin_pattern"), [
    ({"type": "string", "pattern": r"\d{4}-\d{2}"}, r'(?:\d{4}-\d{2})'),
    ({"pattern": ".+"}, "(?:.+)"),
    ({"type": ["string", "null"], "pattern": "foo|bar"}, "(?:foo|bar)"),
    ({"type": "string", "pattern": r"[a-z]+\d$"}, r"(?:[a-z]+\d)$"),
    ({"type": "string", "pattern": r"[$^]x\^\$"}, r"(?:[$^]x\^\$)"),  # class, escapes: no anchor
    ({"type": "string", "pattern": r"[]^]a"}, r"(?:[]^]a)"),  # a leading `]` is a member
])
def test_a_search_pattern_gets_a_twin(schema: dict[str, Any], twin_pattern: str) -> None:
    twin = sliceable_twin(schema)
    assert twin is not None and twin["type"] == "string"
    assert twin["pattern"].startswith('^[^"\\\\\\x00-\\x1F\\x7F]*"[\\s\\S]*')
    assert twin["pattern"].endswith(twin_pattern)


@pytest.mark.parametrize("schema", [
    {"type": "string", "pattern": "^ab"},  # anchored at its start: already narrow
    {"type": "string", "pattern": "a|^b"},
    {"type": "string", "pattern": "a$|b"},  # `$` not last
    {"type": "string", "pattern": "a$[x]"},
    {"type": "string", "pattern": ""},
    {"type": "string", "pattern": "ab", "maxLength": 9},  # lengths / formats defeat the slicer
    {"type": "string", "pattern": "ab", "format": "email"},
    {"type": "string", "pattern": "ab", "enum": ["ab"]},
    {"type": "integer", "pattern": "ab"},
    {"type": "string"},
    True,
])
def test_no_twin_where_it_would_not_be_exact_or_would_not_help(schema: Any) -> None:
    assert sliceable_twin(schema) is None


@pytest.mark.parametrize("pattern", [r"\d{2}-\d", "b+", r"a|b\d$", r'"a"', r"[ab]{2}$"])
def test_a_twin_admits_only_strings_its_pattern_admits(pattern: str) -> None:
    twin = sliceable_twin({"type": "string", "pattern": pattern})
    assert twin is not None
    rng = random.Random(7)
    alphabet = 'ab12-" \n\\'

    def piece(most: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, most)))

    matched = 0
    for _ in range(20_000):  # half of them hold a `"` after a few characters, as twins need
        text = piece(3) + rng.choice(['"', ""]) + piece(8)
        if re.search(twin["pattern"], text):
            matched += 1
            assert re.search(pattern, text), (pattern, text)
    assert matched >= 10  # the sample reaches the twin, not only its refusals


def _schema(pattern: str) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": ["when"],
            "properties": {"when": {"type": "string", "pattern": pattern},
                           "tags": {"type": "array", "items": {"type": "string",
                                                               "pattern": pattern}},
                           "n": {"type": "integer"}}}


def test_twins_reach_nested_strings_but_not_a_root_string() -> None:
    grammar = object_rules_grammar(_schema(r"\d-\d"), property_order="schema",
                                   json_options=OPTIONS)
    assert grammar is not None and grammar.count("%json") == 5  # when, tags item: two each; n
    assert object_rules_grammar({"type": "string", "pattern": r"\d-\d"},
                                property_order="schema", json_options=OPTIONS) is None
    through_ref = {"$ref": "#/$defs/s", "$defs": {"s": {"type": "string", "pattern": "a"}}}
    assert object_rules_grammar(through_ref, property_order="schema", json_options=OPTIONS) is None
    anchored = _schema(r"^\d-\d$")
    assert object_rules_grammar(anchored, property_order="schema", json_options=OPTIONS) is None


TEXTS = [
    '{"when": "2013-11-01T12:00:00", "n": 1}',
    '{"when": "on 2013-11-01, \\"quoted\\" \\u00e9 é 🙂\\n tail", "tags": ["x 1999-12-31"]}',
    '{"when": "no date here at all, just words", "n": 2}',  # refused at its closing quote
    '{"when": "a line\\nthen 2013-11-01 tail"}',  # a newline before the match
    '{"when": "2013-1-01"}',
    '{"when": "say \\"hi\\" now", "n": 3}',  # a quote, then no match: refused
    '{"tags": ["2013-11-01"], "when": "2013-11-01"}',  # schema order: refused at "when"
]


@pytest.mark.parametrize("pattern", [r"\d{4}-\d{2}-\d{2}", ".+", r"[a-z]+\d$", "date|tail"])
def test_masks_equal_the_json_compilers_at_every_position(
        pattern: str, llg_compiler: GrammarCompiler, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = llg_compiler._get_backend("llguidance")
    spec = GrammarSpec("json_schema", canonical_json(_schema(pattern)), (("strict", False),))
    with_twins = backend.grammar_text(spec)
    monkeypatch.setattr(json_object_rules, "sliceable_twin", lambda schema: None)
    plain = backend.grammar_text(spec)  # the same rules, each string one `%json` leaf
    assert with_twins.count("%json") > plain.count("%json")  # the twins: `| %json {twin}`
    validator = jsonschema.Draft202012Validator(_schema(pattern))
    rows = torch.zeros((2, (backend.vocab_size + 31) // 32), dtype=torch.int32)
    compared = 0
    for text in TEXTS:
        matchers = [llguidance.LLMatcher(backend.tokenizer, g, log_level=0)
                    for g in (with_twins, plain)]
        accepted = [True, True]
        for token in llg_compiler.encode(text):
            for row, matcher in enumerate(matchers):
                matcher.unsafe_compute_mask_ptr(rows[row].data_ptr(), rows[row].numel() * 4)
            assert torch.equal(rows[0], rows[1]), (pattern, text)
            compared += 1
            accepted = [m.consume_token(token) for m in matchers]
            assert accepted[0] == accepted[1], (pattern, text)
            if not accepted[0]:
                break
        complete = accepted[0] and matchers[0].is_accepting()
        assert complete == matchers[1].is_accepting() or not accepted[0]
        if complete:
            assert validator.is_valid(json.loads(text)), text
    assert compared > 60
