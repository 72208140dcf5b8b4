"""engine.pacing.acceptance_model + AdaptiveK: depth-wise acceptance picks longer K where acceptance
is bursty and the geometric model's K where it is i.i.d.

Synthetic, seeded acceptance: i.i.d. (each draft accepted with alpha) and bursty (each step
is either "in step", every draft accepted with 0.98, or not, 0.3: the hazard rises with depth
as in structured output). Costs: a bf16-native EPYC's,
measured (docs/speculation.md: flat verify to 3 tokens, draft 0.40 of a plain step)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from engine.pacing.acceptance_model import AcceptancePriors, DepthAcceptance
from engine.pacing.adaptive import AdaptiveK
from engine.pacing.cost_model import ForwardCosts
from sampler import (
    expected_speedup,
    expected_speedup_from_hazards,
    expected_tokens_from_hazards,
    expected_tokens_per_step,
)

QUIET_EPYC = ForwardCosts(target_s=(0.334, 0.334, 0.334, 0.343, 0.367), draft_s=0.133)
Accept = Callable[[random.Random, int], int]


def iid(alpha: float) -> Accept:
    def draw(rng: random.Random, k: int) -> int:
        a = 0
        while a < k and rng.random() < alpha:
            a += 1
        return a
    return draw


def bursty(p_in_step: float = 0.7, in_step: float = 0.98, off_step: float = 0.3) -> Accept:
    def draw(rng: random.Random, k: int) -> int:
        h = in_step if rng.random() < p_in_step else off_step
        a = 0
        while a < k and rng.random() < h:
            a += 1
        return a
    return draw


def true_speedup(draw: Accept, k: int, *, n: int = 20_000) -> float:
    """Monte-Carlo speedup of K drafts under the generating process (not the model)."""
    if k == 0:
        return 1.0
    rng = random.Random(12345)
    tokens = sum(draw(rng, k) + 1 for _ in range(n)) / n
    return tokens / (QUIET_EPYC.step_s(k) / QUIET_EPYC.plain_s)


def drive(draw: Accept, *, seed: int, steps: int = 300) -> tuple[list[int], list[int]]:
    """K chosen per step by AdaptiveK, and by the geometric model on the same pooled alpha."""
    rng = random.Random(seed)
    ctl = AdaptiveK(k_max=4, costs=QUIET_EPYC)
    ctl.observe(k=0, num_drafts=0, num_accepted=0, draft_s=0.0, target_s=1.0)  # the prefill step
    chosen, geometric = [], []
    for _ in range(steps):
        k = ctl.choose_k()
        chosen.append(k)
        geometric.append(QUIET_EPYC.best_k(ctl.alpha)[0])
        accepted = draw(rng, k) if k else 0
        ctl.observe(k=k, num_drafts=k, num_accepted=accepted, draft_s=0.133 * k, target_s=0.334)
    return chosen, geometric


def test_hazards_generalise_the_geometric_sum() -> None:
    for alpha in (0.0, 0.3, 0.8, 1.0):
        for k in range(6):
            assert expected_tokens_from_hazards([alpha], k) == pytest.approx(expected_tokens_per_step(alpha, k))
            assert expected_speedup_from_hazards([alpha], k, 0.4, 1.1) == pytest.approx(
                expected_speedup(alpha, k, 0.4, 1.1))
    assert expected_tokens_from_hazards([0.5, 1.0, 0.5], 3) == pytest.approx(1 + 0.5 + 0.5 + 0.25)
    assert expected_tokens_from_hazards([0.5, 0.9], 4) == pytest.approx(1 + 0.5 + 0.45 + 0.405 + 0.3645)
    with pytest.raises(ValueError):
        expected_tokens_from_hazards([1.2], 2)
    with pytest.raises(ValueError):
        expected_tokens_from_hazards([], 1)


def test_depth_counts_prior_and_extrapolation() -> None:
    est = DepthAcceptance(depth=4, prior_alpha=0.6, prior_weight=2.0, decay=1.0)
    assert est.hazards() == pytest.approx([0.6] * 4)
    for _ in range(50):  # depth 0 rejected half the time; past it, always accepted; K=2 only
        est.observe(num_drafts=2, num_accepted=0)
        est.observe(num_drafts=2, num_accepted=2)
    h = est.hazards()
    assert h[0] == pytest.approx((50 + 2 * 0.6) / (100 + 2))
    assert h[1] == pytest.approx((50 + 2 * 0.6 + 3 * h[0]) / (50 + 2 + 3))
    assert h[1] > 0.95 > 0.55 > h[0]
    assert h[2] == pytest.approx((2 * 0.6 + 3 * h[1]) / 5)  # never reached: prior and the depth above
    assert est.alpha == pytest.approx((100 + 1.2) / (100 + 1.2 + 50 + 0.8))  # the pooled i.i.d. view
    with pytest.raises(ValueError):
        est.observe(num_drafts=1, num_accepted=2)
    forgetting = DepthAcceptance(depth=4, prior_alpha=0.6, decay=0.95)
    for _ in range(100):
        forgetting.observe(num_drafts=2, num_accepted=0)
        forgetting.observe(num_drafts=2, num_accepted=2)
    h = forgetting.hazards()
    assert h[1] > h[0] + 0.3 and h[1] > 0.85 and h[2] == pytest.approx(h[1], abs=1e-3) and h[3] == pytest.approx(h[1], abs=1e-3)  # the prior faded: the depth above


def test_shared_prior_seeds_new_requests() -> None:
    priors = AcceptancePriors(depth=4)
    shared = priors.shared("model")
    assert priors.shared("model") is shared and priors.shared("ngram") is not shared
    first = AdaptiveK(k_max=4, costs=QUIET_EPYC, shared=shared)
    assert first.hazards() == pytest.approx([0.6] * 4)  # nothing known yet: the generic prior,
    assert first.choose_k() == 4  # and one step at K_max measures every depth
    first.observe(k=4, num_drafts=4, num_accepted=1, draft_s=0.5, target_s=0.37)
    assert first.choose_k() == QUIET_EPYC.best_k(first.hazards())[0] < 4  # then the estimate decides
    for _ in range(40):
        first.observe(k=4, num_drafts=4, num_accepted=4, draft_s=0.5, target_s=0.37)
    second = AdaptiveK(k_max=4, costs=QUIET_EPYC, shared=shared)
    assert min(second.hazards()) > 0.9 and not second.acceptance.observed
    assert second.choose_k() == 4  # from the pair's record, not from exploring
    poor = priors.shared("ngram")
    for _ in range(40):
        poor.observe(num_drafts=4, num_accepted=0)
    assert AdaptiveK(k_max=4, costs=QUIET_EPYC, shared=poor).choose_k() == 0  # a pair that never agrees: off


def against_geometric(draw: Accept, *, seeds: int = 5, steps: int = 300) -> tuple[float, float]:
    """(mean K chosen minus the geometric model's, true speed of the chosen Ks ÷ of its Ks)."""
    speeds = {k: true_speedup(draw, k) for k in range(5)}
    longer = got = want = 0.0
    for seed in range(seeds):
        chosen, geometric = drive(draw, seed=seed, steps=steps)
        longer += sum(chosen) - sum(geometric)
        got += sum(speeds[k] for k in chosen)
        want += sum(speeds[k] for k in geometric)
    return longer / (seeds * steps), got / want


def test_bursty_acceptance_gets_longer_k_and_more_speed() -> None:
    draw = bursty()
    speeds = {k: true_speedup(draw, k) for k in range(5)}
    assert max(speeds, key=lambda k: speeds[k]) >= 3  # the process rewards long K
    longer, speed = against_geometric(draw)
    assert longer > 0.15  # on average K is > 0.15 longer per step
    assert speed >= 0.995  # and no slower (the speedup curve is flat near its optimum)


@pytest.mark.parametrize("alpha", [0.8, 0.9])
def test_iid_acceptance_chooses_as_the_geometric_model(alpha: float) -> None:
    longer, speed = against_geometric(iid(alpha))
    assert abs(longer) < 0.2  # the same K up to estimation noise
    assert speed >= 0.99
