"""Aggregation: sums over requests, speedup against the no-spec row of the same workload and
temperature, predicted speedup from the measured costs, percentiles, errors kept."""

from __future__ import annotations

import pytest

from benchmarks.suite.metrics import aggregate, percentile
from benchmarks.suite.records import RequestRecord
from sampler import expected_speedup


def _record(config: str, *, k: int, tokens: int, steps: int, drafted: int | None, accepted: int | None,
            decode_time: float, draft_time: float, latency: float, valid: bool = True,
            finish_reason: str = "stop") -> RequestRecord:
    return RequestRecord(
        "json", config, f"c{latency}", k, 0.0, completion_tokens=tokens, steps=steps, draft_tokens=drafted,
        accepted_tokens=accepted, forced_draft_tokens=0, forced_accepted_tokens=0, draft_forwards=0,
        draft_strays=0, strays_early=0, time_draft_s=draft_time, time_target_s=decode_time - draft_time,
        time_mask_s=0.0, time_sampler_s=0.0, decode_tokens=tokens - 1, decode_steps=steps - 1,
        decode_time_s=decode_time, decode_draft_s=draft_time, decode_verify_s=decode_time - draft_time,
        latency_s=latency, valid=valid, finish_reason=finish_reason,
    )


def test_percentile() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([0.0, 10.0], 99) == pytest.approx(9.9)


def test_speedup_and_prediction() -> None:
    base = [_record("no-spec", k=0, tokens=11, steps=11, drafted=0, accepted=0, decode_time=1.0, draft_time=0.0,
                    latency=1.2)]
    spec = [_record("specgate", k=4, tokens=11, steps=4, drafted=12, accepted=6, decode_time=0.6, draft_time=0.2,
                    latency=0.8, valid=False)]
    errored = [RequestRecord("json", "hf-assisted", "x", 4, 0.0, error="AssertionError: boom")]
    rows = {row["config"]: row for row in aggregate(base + spec + errored)}
    assert rows["no-spec"]["speedup"] == pytest.approx(1.0)
    s = rows["specgate"]
    assert s["acceptance_rate"] == pytest.approx(0.5)
    assert s["mean_accepted_length"] == pytest.approx(11 / 4)
    assert s["tokens_per_second"] == pytest.approx(10 / 0.6)
    assert s["speedup"] == pytest.approx((10 / 0.6) / 10.0)
    plain_step = 1.0 / 10
    c = (0.2 / 3) / (4 * plain_step)
    predicted = expected_speedup(0.5, 4, c, (0.4 / 3) / plain_step)
    assert s["predicted_speedup"] == pytest.approx(predicted)
    assert s["speedup_vs_predicted"] == pytest.approx(s["speedup"] / predicted)
    assert s["validity"] == 0.0
    assert rows["hf-assisted"]["errors"] == 1 and rows["hf-assisted"]["error"].startswith("AssertionError")
    assert "tokens_per_second" not in rows["hf-assisted"]


def test_an_output_cut_at_max_tokens_is_not_valid() -> None:
    common = dict(k=4, tokens=8, steps=3, drafted=8, accepted=5, decode_time=0.5, draft_time=0.1)
    records = [_record("specgate", latency=1.0, **common), _record("specgate", latency=2.0, **common, valid=False),
               _record("specgate", latency=3.0, **common, finish_reason="length")]  # oracle says yes, but cut
    (row,) = aggregate(records)
    assert row["stopped"] == pytest.approx(2 / 3)
    assert row["validity"] == pytest.approx(1 / 3)
    assert row["valid_if_stopped"] == pytest.approx(1 / 2)


def test_greedy_match_compares_each_case_with_no_spec() -> None:
    common = dict(tokens=8, steps=3, drafted=8, accepted=5, decode_time=0.5, draft_time=0.1)
    base = [_record("no-spec", latency=1.0, **{**common, "drafted": 0, "accepted": 0}, k=0),
            _record("no-spec", latency=2.0, **{**common, "drafted": 0, "accepted": 0}, k=0)]
    base[0].text, base[1].text = "a", "b"
    spec = [_record("specgate", latency=1.0, k=4, **common), _record("specgate", latency=2.0, k=4, **common)]
    spec[0].text, spec[1].text = "a", "c"  # same case ids as the baseline (c1.0, c2.0)
    rows = {row["config"]: row for row in aggregate(base + spec)}
    assert rows["specgate"]["greedy_match"] == pytest.approx(0.5)
    assert rows["no-spec"]["greedy_match"] is None
