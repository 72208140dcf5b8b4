"""FillTimes (grammars.fill_times) and the fill counting every Matcher does with it."""

from __future__ import annotations

import pytest

from grammars import FILL_BUCKETS_S, FillTimes, spec_from_request

SCHEMA_SPEC = spec_from_request({"guided_json": {
    "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"], "additionalProperties": False}})
IM_END = 151_645


def test_bounds_are_inclusive_upper_bounds_with_an_overflow_bucket() -> None:
    times = FillTimes()
    times.observe_ns(500_000)  # exactly 500 µs: in the 500 µs bucket (Prometheus `le`)
    times.observe_ns(500_001)  # just over: the 1 ms bucket
    times.observe_ns(0)
    times.observe_ns(10**9)  # 1 s: overflow
    index = FILL_BUCKETS_S.index(5e-4)
    assert times.counts[0] == 1
    assert times.counts[index] == 1 and times.counts[index + 1] == 1
    assert times.counts[-1] == 1 and len(times.counts) == len(FILL_BUCKETS_S) + 1
    assert times.count == 4
    assert times.sum_s == pytest.approx(1.001000001)


def test_merge_adds_counts_and_sums() -> None:
    first, second = FillTimes(), FillTimes()
    first.observe_ns(40_000)
    second.observe_ns(40_000)
    second.observe_ns(3_000_000)
    first.merge(second)
    assert first.count == 3 and second.count == 2
    assert first.counts[FILL_BUCKETS_S.index(5e-5)] == 2
    assert first.counts[FILL_BUCKETS_S.index(5e-3)] == 1
    assert first.as_dict() == {"buckets_s": list(FILL_BUCKETS_S), "counts": first.counts,
                               "sum_s": pytest.approx(0.00308), "count": 3}


def test_every_backend_fill_is_counted_once(any_compiler, qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    matcher = any_compiler.compile(SCHEMA_SPEC).matcher()
    bitmask = any_compiler.allocate_bitmask(5)
    matcher.fill_mask(bitmask, 0)
    assert (matcher.fill_times.count, matcher.fill_masks_times.count) == (1, 0)
    assert matcher.accept_text('{"name": ')
    drafts = qwen_tokenizer.encode('"Ada", "age')
    rows = matcher.fill_masks(bitmask, drafts[:4])
    assert rows == 5
    assert (matcher.fill_times.count, matcher.fill_masks_times.count) == (1, rows)
    assert matcher.fill_times.sum_s > 0 and matcher.fill_masks_times.sum_s > 0
    assert matcher.fill_masks(bitmask, [IM_END]) == 1  # "}" still owed: the stop token is refused
    assert matcher.fill_masks_times.count == rows + 1
    assert matcher.fill_masks(bitmask, drafts[:4], filled_rows=4) == 5  # the drafter's four rows
    assert matcher.fill_masks_times.count == rows + 2
    assert matcher.accept_text('"Ada", "age": 3}') and matcher.accept_token(IM_END)
    matcher.fill_mask(bitmask, 0)  # terminated: the stop-only row is no backend fill
    assert matcher.fill_masks(bitmask, []) == 0
    assert (matcher.fill_times.count, matcher.fill_masks_times.count) == (1, rows + 2)


def test_schema_aware_sql_counts_its_fills_not_the_inner_grammars(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    ddl = "CREATE TABLE singer (id INT, name TEXT);"
    compiled = xgr_compiler.compile(spec_from_request({"response_format": {"type": "sql", "sql": {"schema": ddl}}}))
    assert compiled.family == "sql_schema"
    assert xgr_compiler.compile(spec_from_request({"response_format": {"type": "sql"}})).family == "sql"
    assert xgr_compiler.compile(SCHEMA_SPEC).family == "json_schema"
    matcher = compiled.matcher()
    bitmask = xgr_compiler.allocate_bitmask(3)
    matcher.fill_mask(bitmask, 0)
    assert matcher.accept_text("SELECT name FROM")
    rows = matcher.fill_masks(bitmask, xgr_compiler.encode(" singer"))
    assert (matcher.fill_times.count, matcher.fill_masks_times.count) == (1, rows)
    assert matcher.inner.fill_times.count == matcher.inner.fill_masks_times.count == 0
