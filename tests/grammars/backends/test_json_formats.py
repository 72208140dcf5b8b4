"""grammars.backends.llguidance.formats: the four formats llguidance ignores, spelled as patterns, agree with
python-jsonschema's format checkers (the coverage oracle) on valid and malformed samples, as
regular expressions and through the llguidance backend; a format next to a `pattern` keeps
both."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest

from grammars import GrammarSpec
from grammars.backends.llguidance.formats import FORMAT_PATTERNS, formats_as_patterns
from grammars.spec import canonical_json

SAMPLES = {
    "uri-reference": ["http://example.com/a?b#c", "//host/path", "/abs/path", "rel/path", "",
                      "#frag", "?q", "a:b", "http://[::1]:80/", "mailto:a@b.c", "../y/z",
                      "a%20b", "http://ex.com/resource/{", "with space", "%zz",
                      "http://\u00e9.com"],
    "uri-template": ["http://example.com/{id}", "{+path}/here", "{?x,y}", "{var:30}",
                     "{list*}", "x{a.b}", "plain", "{a,}", "{.a}", "<x>",
                     "http://example.com/resource/{", "}", "{}", "{ a}", "{a:0}",
                     "{a:10000}", "{=a}", "{\u00e9}"],
    "json-pointer": ["", "/", "/a/b", "/a~0b", "/a~1b", "/\u00e9", "/a~2", "a", "/~"],
    "relative-json-pointer": ["0", "1/a", "0#", "2/a~1b", "01", "-1", "#", "3#/"],
}
CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


def _accepts(compiler: Any, schema: Any, text: str) -> bool:
    compiled = compiler.compile(GrammarSpec("json_schema", canonical_json(schema),
                                            (("strict", False),)))
    assert compiled.backend == "llguidance"
    matcher = compiled.matcher()
    return bool(matcher.accept_text(text) and matcher.can_stop())


def test_the_samples_hold_both_verdicts() -> None:
    for fmt, samples in SAMPLES.items():
        verdicts = {CHECKER.conforms(s, fmt) for s in samples}
        assert verdicts == {True, False}, fmt  # the checker is installed and discriminates


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_patterns_agree_with_the_oracle(llg_compiler, fmt: str) -> None:  # type: ignore[no-untyped-def]
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": fmt}},
              "required": ["v"]}
    for sample in SAMPLES[fmt]:
        truth = CHECKER.conforms(sample, fmt)
        assert bool(re.fullmatch(FORMAT_PATTERNS[fmt].strip("^$"), sample)) is truth, sample
        text = json.dumps({"v": sample}, ensure_ascii=False)
        assert _accepts(llg_compiler, schema, text) is truth, sample


def test_a_format_beside_a_pattern_keeps_both(llg_compiler) -> None:  # type: ignore[no-untyped-def]
    schema = {"type": "string", "format": "json-pointer", "pattern": "^/a"}
    rewritten = formats_as_patterns(schema, FORMAT_PATTERNS)
    assert rewritten["pattern"] == "^/a" and "format" not in rewritten
    assert rewritten["allOf"] == [{"pattern": FORMAT_PATTERNS["json-pointer"]}]
    assert "format" in schema  # the input is not modified
    assert _accepts(llg_compiler, schema, '"/a/b"')
    assert not _accepts(llg_compiler, schema, '"/b"')  # the pattern
    assert not _accepts(llg_compiler, schema, '"/a~2"')  # the format


def test_other_formats_are_left_alone() -> None:
    schema = {"type": "string", "format": "date-time"}
    assert formats_as_patterns(schema, FORMAT_PATTERNS) == schema
