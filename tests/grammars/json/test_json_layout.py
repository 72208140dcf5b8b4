"""JSON whitespace layout (grammars.json.layout): the default "conventional" layout refuses
whitespace before `,` and `:` and accepts compact, one-line and indented JSON; "flexible"
(the compiler option) still accepts whitespace anywhere between tokens. On every backend
that honours the option, for json_schema, json_object and tool arguments."""

from __future__ import annotations

import json
from typing import Any

import pytest

from grammars import GrammarCompiler
from grammars.backends.llguidance.object_rules import object_rules_grammar
from grammars.json.layout import conventional_ebnf
from grammars.spec import GrammarSpec, canonical_json
from grammars.tools import tools_spec

QWEN_VOCAB = 151_936

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "country": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "integer"}},
        "extra": {"type": "object"},
        "where": {"anyOf": [{"type": "object", "properties": {"lat": {"type": "number"}},
                             "required": ["lat"]}, {"type": "null"}]},
    },
    "required": ["city", "country"],
}
VALUE = {"city": "Paris", "country": "France", "tags": [1, 2],
         "extra": {"a": [1, {"b": None}], "c": "d"}, "where": {"lat": 48.85}}
LAYOUTS = {  # how people and the models we ship write JSON: all accepted
    "compact": json.dumps(VALUE, separators=(",", ":")),
    "one line": json.dumps(VALUE),
    "indent 2": json.dumps(VALUE, indent=2),
    # (deeper: past the 16-character whitespace bound, refused by both layouts)
    "indent 4": json.dumps({k: VALUE[k] for k in ("city", "country", "tags")}, indent=4),
}
BEFORE_SEPARATOR = {  # valid JSON, refused by the default layout only
    "newline before comma": '{\n  "city": "Paris"\n  ,\n  "country": "France"\n}',
    "space before comma": '{"city": "Paris" , "country": "France"}',
    "space before colon": '{"city" : "Paris", "country": "France"}',
    "in an array": '{"city": "P", "country": "F", "tags": [1 , 2]}',
    "in a free-form object": '{"city": "P", "country": "F", "extra": {"a" : 1}}',
    "in a nested object": '{"city": "P", "country": "F", "where": {"lat": 1 }}'.replace(
        "1 }", "1 ,\"x\": 2}"),  # refused either way (`x` unlisted): a control
}


@pytest.fixture(scope="module")
def flexible(qwen_tokenizer):  # type: ignore[no-untyped-def]
    return {backend: GrammarCompiler(qwen_tokenizer, backend=backend, vocab_size=QWEN_VOCAB,
                                     json_whitespace="flexible")
            for backend in ("xgrammar", "llguidance")}


@pytest.fixture(scope="module")
def conventional(xgr_compiler, llg_compiler):  # type: ignore[no-untyped-def]
    assert xgr_compiler.json_whitespace == llg_compiler.json_whitespace == "conventional"
    return {"xgrammar": xgr_compiler, "llguidance": llg_compiler}


def _accepts(compiler: GrammarCompiler, spec: GrammarSpec, text: str) -> bool:
    matcher = compiler.compile(spec).matcher()
    return bool(matcher.accept_text(text) and matcher.can_stop())


def _schema_spec(schema: Any) -> GrammarSpec:
    return GrammarSpec("json_schema", canonical_json(schema), (("strict", False),))


@pytest.mark.parametrize("backend", ["xgrammar", "llguidance"])
def test_default_accepts_every_layout_and_refuses_whitespace_before_separators(
        conventional, flexible, backend) -> None:  # type: ignore[no-untyped-def]
    spec = _schema_spec(SCHEMA)
    assert conventional[backend].compile(spec).backend == backend
    for name, text in LAYOUTS.items():
        assert _accepts(conventional[backend], spec, text), name
        assert _accepts(flexible[backend], spec, text), name
    for name, text in BEFORE_SEPARATOR.items():
        assert not _accepts(conventional[backend], spec, text), name
        if name != "in a nested object":
            assert _accepts(flexible[backend], spec, text), name
    assert not _accepts(flexible[backend], spec, BEFORE_SEPARATOR["in a nested object"])


@pytest.mark.parametrize("backend", ["xgrammar", "llguidance"])
def test_json_object_layouts(conventional, flexible, backend) -> None:  # type: ignore[no-untyped-def]
    spec = GrammarSpec("json_object", "")
    for name, text in LAYOUTS.items():
        assert _accepts(conventional[backend], spec, text), name
    for text in ('{"a": 1 , "b": 2}', '{"a" :1}', '{"a": [1\n, 2]}'):
        assert not _accepts(conventional[backend], spec, text), text
        assert _accepts(flexible[backend], spec, text), text


def test_whitespace_after_a_value_only_where_the_object_may_close(
        conventional) -> None:  # type: ignore[no-untyped-def]
    """Where the schema forbids closing, no whitespace after the value: the model is not
    offered the newline it would then have to follow with a comma."""
    spec = _schema_spec(SCHEMA)
    for compiler in conventional.values():
        matcher = compiler.compile(spec).matcher()
        assert matcher.accept_text('{\n  "city": "Paris"')
        assert not matcher.accept_text("\n")
        assert matcher.accept_text(',\n  "country": "France"\n}') and matcher.can_stop()


def test_tool_arguments_follow_the_layout(qwen_tokenizer, xgr_compiler,
                                          flexible) -> None:  # type: ignore[no-untyped-def]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"]}}}]
    head = '<tool_call>\n{"name": "get_weather", "arguments": '
    good = [head + '{"city": "Paris", "days": 2}}\n</tool_call>',
            head + '{\n  "city": "Paris",\n  "days": 2\n}}\n</tool_call>']
    bad = [head + '{"city": "Paris"\n, "days": 2}}\n</tool_call>',
           head + '{"city" : "Paris", "days": 2}}\n</tool_call>']
    for choice in ("required", "auto"):
        spec = tools_spec(tools, choice, None)
        assert spec is not None
        for text in good:
            assert _accepts(xgr_compiler, spec, text), (choice, text)
            assert _accepts(flexible["xgrammar"], spec, text), (choice, text)
        for text in bad:
            assert not _accepts(xgr_compiler, spec, text), (choice, text)
            assert _accepts(flexible["xgrammar"], spec, text), (choice, text)


def test_layout_is_part_of_the_cache_key_and_checked(qwen_tokenizer, xgr_compiler,
                                                     flexible) -> None:  # type: ignore[no-untyped-def]
    spec = _schema_spec(SCHEMA)
    assert xgr_compiler._key(spec) != flexible["xgrammar"]._key(spec)
    assert xgr_compiler._disk_key("xgrammar", spec) != flexible["xgrammar"]._disk_key("xgrammar", spec)
    with pytest.raises(ValueError, match="json_whitespace"):
        GrammarCompiler(qwen_tokenizer, vocab_size=QWEN_VOCAB,
                        json_whitespace="pretty")  # type: ignore[arg-type]


def test_conventional_ebnf_drops_exactly_the_gaps_before_separators() -> None:
    import xgrammar as xgr

    flexible_ebnf = str(xgr.Grammar.from_json_schema(
        json.dumps(SCHEMA), any_whitespace=True, max_whitespace_cnt=16, strict_mode=True))
    tight = conventional_ebnf(flexible_ebnf)
    for separator in ('","', '":"'):
        assert f'{{0, 16}} {separator}' in flexible_ebnf  # xgrammar still writes gaps so
        assert f'{{0, 16}} {separator}' not in tight
    assert tight.count("{0, 16}") > 0  # the other gaps stay
    # a string constant holding the gap's text is not touched
    assert conventional_ebnf('x ::= "whitespace{0, 16} \\",\\""') == 'x ::= "whitespace{0, 16} \\",\\""'


def test_object_rules_write_no_gap_before_separators() -> None:
    options = {"whitespace_flexible": True}
    tight = object_rules_grammar(SCHEMA, property_order="schema", json_options=options,
                                 whitespace="conventional")
    assert tight is not None
    assert 'WS? ","' not in tight and 'WS? ":"' not in tight
    # the flexible layout keeps the JSON compiler's grammar where nothing else changes
    assert object_rules_grammar({"type": "object", "properties": {"a": {"type": "string"}},
                                 "additionalProperties": False},
                                property_order="schema", json_options=options) is None
