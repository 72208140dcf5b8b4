"""The rows of every Matcher along the engine's walk: the drafter fills the verify's rows at
its positions (straight into the verify bitmask), `fill_masks(filled_rows=)` fills only the
rows after them, and every row equals the row a fresh matcher fills after the same history,
through drafts, rollbacks and diverging tokens."""

from __future__ import annotations

import random

import numpy as np
import pytest

from grammars import spec_from_request

SCHEMA_SPEC = spec_from_request({"guided_json": {
    "type": "object", "properties": {"name": {"type": "string"}, "tags": {
        "type": "array", "items": {"enum": ["a", "bc"]}}}, "required": ["name", "tags"],
    "additionalProperties": False}})
SCHEMA_TEXT = '{"name": "Ada Lovelace", "tags": ["a", "bc", "a"]}'
SQL_SPEC = spec_from_request({"response_format": {"type": "sql", "sql": {
    "schema": "CREATE TABLE singer (id INT, name TEXT, age INT); CREATE TABLE concert (id INT, singer_id INT);"}}})
SQL_TEXT = "SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.singer_id WHERE T1.age > 30"
IM_END = 151_645


def _reference_row(compiled, history: list[int], bitmask) -> np.ndarray:  # type: ignore[no-untyped-def]
    fresh = compiled.matcher()
    for token in history:
        assert fresh.accept_token(token)
    fresh.fill_mask(bitmask, 0)
    return bitmask[0].numpy().copy()


def _speculative_walk(compiler, compiled, tokens: list[int], *, seed: int) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """Drive one matcher as the engine does (drafter rows into the verify bitmask, roll back,
    the verify's remaining row, commit a prefix then another token), with drafts that stray;
    check every row against a fresh matcher's. Returns (rows the verify filled, rows checked)."""
    rng = random.Random(seed)
    matcher = compiled.matcher()
    bitmask = compiler.allocate_bitmask(6)
    scratch = compiler.allocate_bitmask(1)
    history: list[int] = []
    checked = 0
    while len(history) < len(tokens):
        truth = tokens[len(history):len(history) + 4]
        drafts = list(truth)
        if drafts and rng.random() < 0.5:  # stray at a random draft: an allowed other token
            at = rng.randrange(len(drafts))
            probe = compiled.matcher()
            for token in history + drafts[:at]:
                assert probe.accept_token(token)
            probe.fill_mask(scratch, 0)
            allowed = [t for t in np.flatnonzero(np.unpackbits(
                scratch[0].numpy().view(np.uint8), bitorder="little")) if t < 151_000 and t != truth[at]]
            drafts = drafts[:at] + ([int(rng.choice(allowed))] if allowed else [])
        advanced = 0
        for token in drafts:  # the drafter, writing the verify's rows
            matcher.fill_mask(bitmask, advanced)
            assert matcher.accept_token(token)
            advanced += 1
        matcher.rollback(advanced)
        rows = matcher.fill_masks(bitmask, drafts, filled_rows=advanced)  # the verify
        for index in range(rows):
            expected = _reference_row(compiled, history + drafts[:index], scratch)
            assert np.array_equal(bitmask[index].numpy(), expected), (len(history), index)
            checked += 1
        matching = next((i for i, (d, t) in enumerate(zip(drafts, truth, strict=False)) if d != t), len(drafts))
        accepted = rng.randrange(matching + 1)  # drafts[:accepted] == truth[:accepted]
        commit = tokens[len(history):len(history) + accepted + 1]  # then the recovered / bonus token
        for token in commit:
            assert matcher.accept_token(token)
        history += commit
    return matcher.fill_masks_times.count, checked


@pytest.mark.parametrize("seed", [0, 1])
def test_drafter_and_verify_rows_equal_a_fresh_matchers_json(any_compiler, seed: int) -> None:  # type: ignore[no-untyped-def]
    compiled = any_compiler.compile(SCHEMA_SPEC)
    verify_fills, checked = _speculative_walk(any_compiler, compiled, any_compiler.encode(SCHEMA_TEXT), seed=seed)
    assert verify_fills < checked // 2  # the verify fills one row a step, the drafter the rest


def test_drafter_and_verify_rows_equal_a_fresh_matchers_schema_aware_sql(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    compiled = xgr_compiler.compile(SQL_SPEC)
    assert compiled.family == "sql_schema"
    verify_fills, checked = _speculative_walk(xgr_compiler, compiled, xgr_compiler.encode(SQL_TEXT), seed=3)
    assert verify_fills < checked // 2


def test_no_row_past_a_stop_token_and_its_rollback_is_exact(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    compiled = xgr_compiler.compile(SCHEMA_SPEC)
    matcher = compiled.matcher()
    bitmask = xgr_compiler.allocate_bitmask(3)
    scratch = xgr_compiler.allocate_bitmask(1)
    tokens = xgr_compiler.encode(SCHEMA_TEXT)
    for token in tokens[:-1]:
        assert matcher.accept_token(token)
    matcher.fill_mask(bitmask, 0)  # the drafter's row at the last token
    assert matcher.fill_masks(bitmask, [tokens[-1], IM_END], filled_rows=1) == 2  # no row past the stop token
    assert matcher.fill_masks_times.count == 1
    assert np.array_equal(bitmask[1].numpy(), _reference_row(compiled, tokens, scratch))
    assert matcher.accept_token(tokens[-1]) and matcher.accept_token(IM_END)
    matcher.fill_mask(bitmask, 0)  # terminated: stop only, no backend fill
    assert matcher.fill_times.count == 1
    matcher.rollback(2)
    matcher.fill_mask(bitmask, 0)  # back before the last token
    assert np.array_equal(bitmask[0].numpy(), _reference_row(compiled, tokens[:-1], scratch))


def test_forgetting_the_scope_tables_makes_the_next_fill_a_first_fill(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    """benchmarks.micro.sql_first_fill and fill_overlap time first fills at one position with it."""
    matcher = xgr_compiler.compile(SQL_SPEC).matcher()
    bitmask = xgr_compiler.allocate_bitmask(1)
    assert matcher.accept_text("SELECT name FROM singer AS")
    matcher.fill_mask(bitmask, 0)
    first = bitmask.clone()
    matcher.forget()  # type: ignore[attr-defined]
    matcher.fill_mask(bitmask, 0)
    assert matcher.fill_times.count == 2
    assert bool((bitmask == first).all())
