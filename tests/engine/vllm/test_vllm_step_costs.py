"""engine.vllm.step_costs: ForwardCosts from a worker's step buckets, and alpha from tokens/step."""

from __future__ import annotations

import pytest

from engine.vllm.step_costs import alpha_from_tokens_per_step, forward_costs_from_times
from sampler import expected_tokens_per_step


def _bucket(steps: int, verify_s: float, propose_s: float) -> dict[str, float]:
    # execute + sample - propose = verify; sample includes propose
    return {"steps": steps, "execute_s": steps * verify_s * 0.9, "sample_s": steps * (verify_s * 0.1 + propose_s),
            "propose_s": steps * propose_s}


def test_costs_from_buckets_interpolate_and_ignore_prefill() -> None:
    times = {"by_tokens": {"1": _bucket(4, 0.5, 1.0), "5m": _bucket(10, 0.7, 1.2), "3": _bucket(2, 0.6, 1.0),
                           "40m": _bucket(3, 2.0, 1.0)}}
    costs = forward_costs_from_times(times, k=4)
    assert costs is not None
    assert costs.target_s == pytest.approx((0.5, 0.55, 0.6, 0.65, 0.7))
    assert costs.draft_s == pytest.approx(1.2 / 4)
    assert forward_costs_from_times({"by_tokens": {"3": _bucket(2, 0.6, 1.0)}}, k=4) is None
    # a noisy dip is made non-decreasing
    dip = forward_costs_from_times({"by_tokens": {"1": _bucket(1, 0.6, 1.0), "2": _bucket(1, 0.4, 1.0),
                                                  "3": _bucket(1, 0.7, 1.0)}}, k=2)
    assert dip is not None and list(dip.target_s) == sorted(dip.target_s)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 0.95])
def test_alpha_round_trip(alpha: float) -> None:
    tau = expected_tokens_per_step(alpha, 4)
    assert alpha_from_tokens_per_step(tau, 4) == pytest.approx(alpha, abs=1e-6)
    assert alpha_from_tokens_per_step(5.0, 4) == 1.0
