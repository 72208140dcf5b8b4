"""engine.vllm.step_k.StepK (pure) and the runner glue's pure parts (step_k_runner): the
per-step draft length maximises expected tokens per second of the batch under the measured
costs, stays within [k_min, k_max], and starts at k_max while nothing is known."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.vllm.step_k import StepK
from engine.vllm.step_k_runner import _valid_counts, after_propose, before_propose, draft_split
from sampler import expected_tokens_per_step


def _timed(step_k: StepK, *, verify: dict[int, float], first: float, draft: float, rounds: int = 5) -> None:
    for _ in range(rounds):
        for n, s in verify.items():
            step_k.observe_step(tokens=n, verify_s=s, first_draft_s=first, draft_s=draft)


def _accept(step_k: StepK, rid: str, *, k: int, alpha: float, steps: int = 200) -> None:
    """Feed i.i.d.-like steps whose mean accepted count matches alpha (deterministic pattern)."""
    import random

    rng = random.Random(0)
    for _ in range(steps):
        a = 0
        while a < k and rng.random() < alpha:
            a += 1
        step_k.observe_acceptance(rid, num_drafts=k, num_accepted=a)


def test_k_max_before_anything_is_known() -> None:
    step_k = StepK(k_max=4)
    assert step_k.choose(["a"]) == 4  # no timing, no acceptance
    _timed(step_k, verify={1: 0.6, 5: 0.66}, first=0.3, draft=0.3)
    assert step_k.choose(["a"]) == 4  # costs, but no acceptance observed anywhere


def test_high_acceptance_keeps_long_drafts_low_acceptance_shortens() -> None:
    high, low = StepK(k_max=4), StepK(k_max=4)
    for s in (high, low):
        _timed(s, verify={1: 0.59, 3: 0.60, 5: 0.66}, first=0.30, draft=0.25)
    _accept(high, "a", k=4, alpha=0.95)
    _accept(low, "a", k=4, alpha=0.3)
    assert high.choose(["a"]) == 4
    k_low = low.choose(["a"])
    assert k_low <= 1


def test_choice_is_the_argmax_of_the_rates_under_iid_acceptance() -> None:
    step_k = StepK(k_max=6, acceptance_decay=1.0)
    _timed(step_k, verify={1: 1.0, 7: 1.3}, first=0.4, draft=0.4)
    _accept(step_k, "a", k=6, alpha=0.8, steps=2000)
    rates = step_k.rates(["a"])
    assert rates is not None and set(rates) == set(range(0, 7))
    k = step_k.choose(["a"])
    assert rates[k] == max(rates.values())
    # the rate is the geometric model's tokens over the vLLM step price (first forward always paid)
    alpha = step_k._requests["a"].alpha
    costs = step_k.costs(1)
    assert costs is not None
    price = costs.target_s[2] + 0.4 + 1 * 0.4  # k=2: 3-token verify, first forward, one more
    assert rates[2] == pytest.approx(expected_tokens_per_step(alpha, 2) / price, rel=0.05)


def test_zero_drafts_when_nothing_pays_and_a_probe_later() -> None:
    step_k = StepK(k_max=4, probe_every=3)
    _timed(step_k, verify={1: 0.5, 5: 2.5}, first=0.05, draft=1.0)  # drafts cost 2x a plain step
    _accept(step_k, "a", k=4, alpha=0.05)
    picks = [step_k.choose(["a"]) for _ in range(5)]
    assert picks[:3] == [0, 0, 0] and picks[3] == 1 and picks[4] == 0


def test_k_min_floor_and_batch_cost() -> None:
    step_k = StepK(k_max=4, k_min=1, probe_every=100)
    _timed(step_k, verify={1: 0.5, 5: 2.5}, first=0.05, draft=1.0)
    _accept(step_k, "a", k=4, alpha=0.05)
    assert step_k.choose(["a"]) == 1
    # verify cost linear in tokens: at batch 4 a k-draft step verifies 4*(k+1) tokens
    costs = step_k.costs(4)
    assert costs is not None and costs.target_s[0] == pytest.approx(step_k.verify.at(4))


def test_slope_never_negative_and_flat_without_spread() -> None:
    step_k = StepK(k_max=4)
    _timed(step_k, verify={5: 0.7}, first=0.3, draft=0.3)
    costs = step_k.costs(1)
    assert costs is not None and costs.target_s == pytest.approx((0.7,) * 5)
    _timed(step_k, verify={1: 0.9, 5: 0.5}, first=0.3, draft=0.3, rounds=20)  # noise: more tokens cheaper
    costs = step_k.costs(1)
    assert costs is not None and costs.target_s[0] == pytest.approx(costs.target_s[-1])


def test_requests_share_a_prior_and_are_dropped() -> None:
    step_k = StepK(k_max=4)
    _accept(step_k, "a", k=4, alpha=0.95)
    assert step_k.hazards("new")[0] > 0.8  # seeded from the pair's acceptance
    step_k.drop(["a", "new"])
    assert not step_k._requests


def test_invalid_bounds() -> None:
    with pytest.raises(ValueError):
        StepK(k_max=0)
    with pytest.raises(ValueError):
        StepK(k_max=2, k_min=3)


def test_draft_split_and_valid_counts() -> None:
    import torch

    assert draft_split(0.0, 1.0, []) == (1.0, None)  # k=0: the whole loop is the first forward
    assert draft_split(0.0, 1.0, [0.4]) == (0.4, None)
    first, further = draft_split(0.0, 2.0, [0.4, 0.7, 1.0])
    assert first == pytest.approx(0.4) and further == pytest.approx(0.3)
    assert _valid_counts(torch.tensor([[5, 6, -1], [7, -1, -1]])) == [2, 1]
    assert _valid_counts([[5, 6], [7]]) == [2, 1]


def _runner(req_ids: list[str], *, on: bool, cycle: list[int] | None = None) -> SimpleNamespace:
    runner = SimpleNamespace(input_batch=SimpleNamespace(req_ids=req_ids),
                             speculative_config=SimpleNamespace(num_speculative_tokens=4),
                             drafter=SimpleNamespace())
    runner._specgate_step_k = {"on": on, "chooser": None, "cycle": cycle, "turn": 0, "proposed": {},
                               "pending": None, "applied": {}}
    return runner


def test_before_propose_sets_k_for_this_call_only() -> None:
    import torch

    runner = _runner(["a"], on=True, cycle=[0, 2, 4])
    seen = []
    for step in range(3):
        out = SimpleNamespace(num_spec_tokens_to_schedule=4, finished_req_ids=set(),
                              scheduled_spec_decode_tokens={"a": [1, 2]} if step else {})
        restore = before_propose(runner, out, torch.tensor([[1, 2, -1]]))
        seen.append(out.num_spec_tokens_to_schedule)
        after_propose(runner, out, restore)
        assert out.num_spec_tokens_to_schedule == 4  # the scheduler's object is left as it was
    assert seen == [0, 2, 4]
    # step 2 observed request a: 2 drafts proposed at step 1, 1 accepted (2 valid - the bonus)
    acc = runner._specgate_step_k["chooser"]._requests["a"]
    assert acc.observed


def test_off_leaves_vllm_k() -> None:
    import torch

    runner = _runner(["a"], on=False)
    out = SimpleNamespace(num_spec_tokens_to_schedule=4, finished_req_ids=set(), scheduled_spec_decode_tokens={})
    assert before_propose(runner, out, torch.tensor([[1]])) is None
    assert out.num_spec_tokens_to_schedule == 4
