"""`\\uXXXX` escapes of printable characters on the llguidance backend: admitted in strings without
`pattern` / `format` exactly when the installed llguidance has
`json_allow_general_unicode_escapes` (1.8+, probed as `UNICODE_ESCAPES`); llguidance 1.7 admits
`\\u` escapes of control characters only. Length bounds count the decoded character."""

from __future__ import annotations

from typing import Any

import pytest

from grammars import GrammarSpec
from grammars.backends.llguidance.backend import UNICODE_ESCAPES
from grammars.spec import canonical_json

# JSONSchemaBench instances are written by json.dumps (ensure_ascii), e.g. Github_easy o36272's
# `"IPA": "h\\u0259lo\\u0283"`; a model may write the same escapes
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
                                           "note": {"type": "string"}},
          "required": ["name"]}


def _accepts(compiler: Any, schema: Any, text: str) -> bool:
    compiled = compiler.compile(GrammarSpec("json_schema", canonical_json(schema),
                                            (("strict", False),)))
    matcher = compiled.matcher()
    return bool(matcher.accept_text(text) and matcher.can_stop())


@pytest.mark.parametrize("text", [
    '{"name": "Ren\\u00e9"}',  # René
    '{"name": "x", "note": "caf\\u00e9 \\ud83d\\ude00"}',  # a surrogate pair
])
def test_printable_escapes_follow_the_library(llg_compiler, text: str) -> None:  # type: ignore[no-untyped-def]
    assert _accepts(llg_compiler, SCHEMA, text) is UNICODE_ESCAPES


@pytest.mark.parametrize("text", [
    '{"name": "Ren\\u00e9e!"}',  # six characters once decoded: maxLength 5
    '{"name": "x", "note": "\\ud83d"}',  # an unpaired surrogate
    '{"name": "\\u00zz"}',  # not an escape
])
def test_invalid_escaped_strings_are_refused(llg_compiler, text: str) -> None:  # type: ignore[no-untyped-def]
    assert not _accepts(llg_compiler, SCHEMA, text)


def test_control_and_literal_spellings_stay_accepted(llg_compiler) -> None:  # type: ignore[no-untyped-def]
    assert _accepts(llg_compiler, SCHEMA, '{"name": "Ren\u00e9", "note": "a\\u0001b"}')


def test_the_pinned_llguidance_admits_printable_escapes() -> None:
    """pyproject pins llguidance >= 1.9, which has `json_allow_general_unicode_escapes`."""
    assert UNICODE_ESCAPES
