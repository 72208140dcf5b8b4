"""JSON-schema front-end policy on the xgrammar backend (open_memberless)."""

from __future__ import annotations

import json

from grammars import GrammarSpec


def test_memberless_objects_and_arrays_are_open(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    schema = {"type": "object", "properties": {"tags": {"type": "array"},
                                               "meta": {"type": "object"},
                                               "n": {"type": "integer"}}}
    compiled = xgr_compiler.compile(GrammarSpec("json_schema", json.dumps(schema)))
    matcher = compiled.matcher()
    assert matcher.accept_text('{"tags": [1, "a"], "meta": {"x": [true]}, "n": 2}')
    assert matcher.can_stop()
    assert not compiled.matcher().accept_text('{"other": 1')  # listed properties stay strict
    assert not compiled.matcher().accept_text('{"n": "2"')
