"""benchmarks.micro.adaptive_replay: K policies replayed on a recorded match sequence, by hand."""

from __future__ import annotations

import pytest

from benchmarks.micro.adaptive_replay import replay
from engine.pacing.cost_model import ForwardCosts

FLAT = ForwardCosts(target_s=(0.3, 0.3, 0.3, 0.3, 0.3), draft_s=0.1, draft_prefill_s=0.01)


def trace(matches: list[int | None], *, prompt_tokens: int = 0, forced: list[bool] | None = None) -> dict:
    return {"workload": "t", "case_id": "c", "prompt_tokens": prompt_tokens, "matches": matches,
            **({"forced": forced} if forced is not None else {})}


def test_fixed_k_steps_and_seconds_by_hand() -> None:
    ones = trace([None] + [1] * 10)  # position 0: the prefill's token
    got = replay(ones, FLAT, policy="fixed", k_max=4, fixed_k=4)
    catch_up = 1 * 0.01  # the draft prefills the prompt (none) and the first token at its first step
    assert got["ks"] == [4, 4] and got["seconds"] == pytest.approx(2 * (4 * 0.1 + 0.3) + catch_up)
    assert got["speedup"] == pytest.approx(10 * 0.3 / (1.4 + catch_up))
    miss = trace([None, 1, 1, 0] + [1] * 7)  # rejected at position 3: the step emits 3 tokens
    got = replay(miss, FLAT, policy="fixed", k_max=4, fixed_k=4)
    assert got["ks"] == [4, 4, 1] and got["seconds"] == pytest.approx(0.7 + 0.7 + 0.4 + catch_up)
    forced = replay(trace([None] + [1] * 10, forced=[False, True] + [False] * 9), FLAT, policy="fixed",
                    k_max=4, fixed_k=4)
    assert forced["seconds"] == pytest.approx(1.4 + catch_up - 0.1)  # a grammar-forced draft: no forward


def test_adaptive_pays_the_draft_prefill_once_after_the_rental() -> None:
    long_prompt = trace([None] + [1] * 30, prompt_tokens=120)
    got = replay(long_prompt, FLAT, policy="adaptive", k_max=4)
    plain_steps = 5  # first n with n x 0.3 s >= (120 + 1 + n) x 10 ms of draft catch-up
    assert got["ks"][:plain_steps] == [0] * plain_steps and got["ks"][plain_steps] == 4  # rent, then K_max
    drafted = got["seconds"] - plain_steps * 0.3 - (120 + plain_steps + 1) * 0.01
    assert drafted == pytest.approx(sum(k * 0.1 + 0.3 for k in got["ks"][plain_steps:]))
