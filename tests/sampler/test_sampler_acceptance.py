"""Acceptance statistics and the speculative cost model."""

from __future__ import annotations

import pytest
import torch

from sampler import AcceptanceStats, expected_speedup, expected_tokens_per_step


@pytest.mark.parametrize(("alpha", "k"), [(0.0, 4), (0.5, 1), (0.8, 4), (0.99, 8), (0.3, 0)])
def test_expected_tokens_matches_geometric_sum(alpha: float, k: int) -> None:
    assert expected_tokens_per_step(alpha, k) == pytest.approx(sum(alpha**i for i in range(k + 1)))


def test_expected_tokens_alpha_one_and_speedup() -> None:
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert expected_speedup(0.8, 4, 0.1) == pytest.approx(expected_tokens_per_step(0.8, 4) / 1.4)
    assert expected_speedup(0.0, 0, 0.5) == 1.0
    assert expected_speedup(1.0, 3, 0.0, verify_cost=2.0) == 2.0


@pytest.mark.parametrize("args", [(-0.1, 2), (1.1, 2), (0.5, -1)])
def test_cost_model_rejects_bad_input(args) -> None:
    with pytest.raises(ValueError):
        expected_tokens_per_step(*args)
    with pytest.raises(ValueError):
        expected_speedup(0.5, 2, -1.0)


def test_stats_update_merge_and_rates() -> None:
    stats = AcceptanceStats()
    assert stats.acceptance_rate == 0.0 and stats.tokens_per_step == 0.0
    stats.update(torch.tensor([4, 4, 2]), torch.tensor([4, 1, 0]))
    assert (stats.drafted, stats.accepted, stats.steps) == (10, 5, 3)
    assert stats.per_position_drafted == [3, 3, 2, 2]
    assert stats.per_position_accepted == [2, 1, 1, 1]
    other = AcceptanceStats().update([5], [5])
    merged = stats.merge(other)
    assert merged is stats
    assert (stats.drafted, stats.accepted, stats.steps) == (15, 10, 4)
    assert stats.per_position_drafted == [4, 4, 3, 3, 1]
    assert stats.per_position_accepted == [3, 2, 2, 2, 1]
    assert stats.acceptance_rate == pytest.approx(10 / 15)
    assert stats.mean_accepted_length == pytest.approx(10 / 4)
    assert stats.tokens_per_step == pytest.approx(14 / 4)
    d = stats.as_dict()
    assert d["tokens_per_step"] == pytest.approx(3.5) and d["per_position_drafted"] == [
        4,
        4,
        3,
        3,
        1,
    ]


def test_stats_rejects_inconsistent_counts() -> None:
    with pytest.raises(ValueError, match="num_accepted"):
        AcceptanceStats().update([2], [3])
    with pytest.raises(ValueError, match="rows"):
        AcceptanceStats().update([2, 2], [1])
