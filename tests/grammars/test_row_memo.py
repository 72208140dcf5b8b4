"""RowMemo (grammars.row_memo) and the row reuse of every Matcher: a reused row is the row a
fresh matcher fills after the same history, through drafts, rollbacks and diverging tokens."""

from __future__ import annotations

import random

import numpy as np
import pytest

from grammars import spec_from_request
from grammars.row_memo import RowMemo

SCHEMA_SPEC = spec_from_request({"guided_json": {
    "type": "object", "properties": {"name": {"type": "string"}, "tags": {
        "type": "array", "items": {"enum": ["a", "bc"]}}}, "required": ["name", "tags"],
    "additionalProperties": False}})
SCHEMA_TEXT = '{"name": "Ada Lovelace", "tags": ["a", "bc", "a"]}'
SQL_SPEC = spec_from_request({"response_format": {"type": "sql", "sql": {
    "schema": "CREATE TABLE singer (id INT, name TEXT, age INT); CREATE TABLE concert (id INT, singer_id INT);"}}})
SQL_TEXT = "SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.singer_id WHERE T1.age > 30"
IM_END = 151_645


def _row(value: int, width: int = 5) -> np.ndarray:
    return np.full(width, value, dtype=np.int32)


def test_memo_keeps_rows_along_the_trail_and_drops_them_past_a_new_token() -> None:
    memo = RowMemo(slots=4)
    out = _row(0)
    memo.put(0, _row(10))
    memo.accepted(0, 7)
    memo.put(1, _row(11))
    memo.accepted(1, 8)
    memo.put(2, _row(12))
    assert memo.get(1, out) and out.tolist() == [11] * 5
    memo.accepted(0, 7)  # replayed after a rollback: every row stays
    memo.accepted(1, 8)
    assert memo.get(2, out) and out.tolist() == [12] * 5
    memo.accepted(1, 9)  # another token at position 1: the row after it was filled under 8
    assert not memo.get(2, out)
    assert memo.get(1, out) and memo.get(0, out) and out.tolist() == [10] * 5
    memo.put(6, _row(16))  # slot 6 % 4 == 2
    assert memo.get(6, out) and not memo.get(2, out)
    memo.forget()
    assert not any(memo.get(position, out) for position in range(8))


def test_tokens_before_a_forget_count_as_unknown() -> None:
    memo = RowMemo(slots=4)
    memo.forget()  # at history length 3
    memo.put(3, _row(13))
    memo.accepted(3, 5)
    memo.put(4, _row(14))
    assert memo.get(3, _row(0)) and memo.get(4, _row(0))
    memo.accepted(1, 5)  # a token at position 1 after a rollback: the trail did not know it
    assert not memo.get(3, _row(0)) and not memo.get(4, _row(0))


def _reference_row(compiled, history: list[int], bitmask) -> np.ndarray:  # type: ignore[no-untyped-def]
    fresh = compiled.matcher()
    fresh.keep_no_rows()
    for token in history:
        assert fresh.accept_token(token)
    fresh.fill_mask(bitmask, 0)
    return bitmask[0].numpy().copy()


def _speculative_walk(compiler, compiled, tokens: list[int], *, seed: int) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """Drive one matcher as the engine does (drafter rows, roll back, verify rows, commit a
    prefix then another token), with drafts that stray; check every row against a fresh
    matcher's. Returns (rows reused, rows checked)."""
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
        for token in drafts:  # the drafter
            matcher.fill_mask(scratch, 0)
            assert np.array_equal(scratch[0].numpy(), _reference_row(compiled, history + drafts[:advanced], bitmask))
            checked += 1
            assert matcher.accept_token(token)
            advanced += 1
        matcher.rollback(advanced)
        rows = matcher.fill_masks(bitmask, drafts)  # the verify
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
    reused = matcher.fill_times.reused + matcher.fill_masks_times.reused
    return reused, checked


@pytest.mark.parametrize("seed", [0, 1])
def test_reused_rows_equal_a_fresh_matchers_json(any_compiler, seed: int) -> None:  # type: ignore[no-untyped-def]
    compiled = any_compiler.compile(SCHEMA_SPEC)
    reused, checked = _speculative_walk(any_compiler, compiled, any_compiler.encode(SCHEMA_TEXT), seed=seed)
    assert reused > checked // 4  # the verify's rows after the drafter's are copies


def test_reused_rows_equal_a_fresh_matchers_schema_aware_sql(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    compiled = xgr_compiler.compile(SQL_SPEC)
    assert compiled.family == "sql_schema"
    reused, checked = _speculative_walk(xgr_compiler, compiled, xgr_compiler.encode(SQL_TEXT), seed=3)
    assert reused > checked // 4


def test_a_stop_token_and_its_rollback_keep_rows_exact(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    compiled = xgr_compiler.compile(SCHEMA_SPEC)
    matcher = compiled.matcher()
    bitmask = xgr_compiler.allocate_bitmask(3)
    scratch = xgr_compiler.allocate_bitmask(1)
    tokens = xgr_compiler.encode(SCHEMA_TEXT)
    for token in tokens[:-1]:
        assert matcher.accept_token(token)
    assert matcher.fill_masks(bitmask, [tokens[-1], IM_END]) == 2  # no row past the stop token
    assert matcher.fill_masks_times.count == 2
    assert matcher.accept_token(tokens[-1]) and matcher.accept_token(IM_END)
    matcher.fill_mask(bitmask, 0)  # terminated: stop only, neither a fill nor a reuse
    assert (matcher.fill_times.count, matcher.fill_times.reused) == (0, 0)
    matcher.rollback(2)
    matcher.fill_mask(bitmask, 0)  # back before the last token: the verify's first row
    assert (matcher.fill_times.count, matcher.fill_times.reused) == (0, 1)
    assert np.array_equal(bitmask[0].numpy(), _reference_row(compiled, tokens[:-1], scratch))
    assert matcher.accept_token(tokens[-1])
    matcher.fill_mask(bitmask, 0)  # complete: the stop token allowed, as when first filled
    assert (matcher.fill_times.count, matcher.fill_times.reused) == (0, 2)
    assert np.array_equal(bitmask[0].numpy(), _reference_row(compiled, tokens, scratch))


def test_a_wrappers_inner_matcher_keeps_no_rows(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    matcher = xgr_compiler.compile(SQL_SPEC).matcher()
    bitmask = xgr_compiler.allocate_bitmask(1)
    inner = matcher.inner  # type: ignore[attr-defined]
    inner.fill_mask(bitmask, 0)
    at_start = bitmask.clone()
    assert matcher.accept_text("SELECT name")
    inner.fill_mask(bitmask, 0)  # its history did not move; its grammar state did
    assert inner.fill_times.reused == 0 and not bool((bitmask == at_start).all())


def test_forgetting_the_scope_tables_makes_the_next_fill_a_first_fill(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    """benchmarks.micro.sql_first_fill and fill_overlap time first fills at one position with it."""
    matcher = xgr_compiler.compile(SQL_SPEC).matcher()
    bitmask = xgr_compiler.allocate_bitmask(1)
    assert matcher.accept_text("SELECT name FROM singer AS")
    matcher.fill_mask(bitmask, 0)
    first = bitmask.clone()
    matcher.forget()  # type: ignore[attr-defined]
    matcher.fill_mask(bitmask, 0)
    assert (matcher.fill_times.count, matcher.fill_times.reused) == (2, 0)
    assert bool((bitmask == first).all())
