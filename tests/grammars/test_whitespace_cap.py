"""Whitespace runs capped by the xgrammar matcher (JSON: max_whitespace, spaces in strings too)."""

from __future__ import annotations

import json

from grammars import GrammarSpec


def _allowed(bitmask, token: int) -> bool:  # type: ignore[no-untyped-def]
    return bool((int(bitmask[0, token // 32]) >> (token % 32)) & 1)


def _schema_matcher(compiler):  # type: ignore[no-untyped-def]
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    return compiler.compile(GrammarSpec("json_schema", json.dumps(schema))).matcher()


def test_json_runs_capped_between_tokens_and_in_strings(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    limit = xgr_compiler.max_whitespace
    matcher = _schema_matcher(xgr_compiler)
    assert matcher.accept_text('{"a":' + " " * limit + '"x' + " " * limit + 'y"}')
    assert matcher.can_stop()
    assert not _schema_matcher(xgr_compiler).accept_text('{"a":' + " " * (limit + 1))
    assert not _schema_matcher(xgr_compiler).accept_text('{"a": "x' + " " * (limit + 1))
    assert not _schema_matcher(xgr_compiler).accept_text("{\n" + "\t" * limit + "\r")


def test_mask_agrees_with_accept_at_every_run_length(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    limit = xgr_compiler.max_whitespace
    space = xgr_compiler.encode(" ")[0]
    four = xgr_compiler.encode("    ")
    assert len(four) == 1
    bitmask = xgr_compiler.allocate_bitmask(1)
    matcher = _schema_matcher(xgr_compiler)
    assert matcher.accept_text('{"a": "')
    for run in range(limit + 1):
        matcher.fill_mask(bitmask)
        for token, width in ((space, 1), (four[0], 4)):
            fits = run + width <= limit
            assert _allowed(bitmask, token) == fits, (run, width)
            if fits:
                assert matcher.accept_token(token)
                matcher.rollback(1)
            else:
                assert not matcher.accept_token(token)
        if run < limit:
            assert matcher.accept_token(space)
    assert matcher.accept_text('x"}') and matcher.can_stop()
    matcher.rollback(matcher.num_accepted)  # rollback restores every run length
    assert matcher.accept_text('{"a":' + " " * limit + '"x"}')


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
