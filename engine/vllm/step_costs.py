"""The torch engine's cost model (`engine.pacing.cost_model.ForwardCosts`) fed with what a vLLM worker
measured (`engine.vllm.timing.PluginTimes.as_dict()`), to say which draft length pays inside
vLLM on this machine.

- `forward_costs_from_times(times, k=...)`: ForwardCosts with `target_s[n-1]` = the worker's
  mean time of a step with n scheduled tokens, n = 1..k+1 (execute_model + rejection
  sampling, the draft loop excluded: `execute_s + sample_s - propose_s`), and `draft_s` = the
  draft loop's time per draft (`propose_s / k`, over the steps that proposed k drafts). Token
  counts never observed are interpolated linearly between observed ones (held flat beyond
  them), then made non-decreasing (`engine.pacing.cost_model.monotone`). Steps with more than k+1
  tokens (prefill) are ignored. Batch 1 only: at batch b a step of n tokens is another shape.
  None when no step with k+1 tokens and none with fewer were timed.
- `alpha_from_tokens_per_step(tau, k)`: the i.i.d. per-draft acceptance whose expected tokens
  per step with k drafts is tau (bisection on `sampler.expected_tokens_per_step`).

Pure arithmetic over measured seconds; knows nothing of vLLM.
"""

from __future__ import annotations

from typing import Any

from engine.pacing.cost_model import ForwardCosts, monotone
from sampler import expected_tokens_per_step


def _interpolate(points: dict[int, float], n_max: int) -> list[float]:
    known = sorted(points)
    out = []
    for n in range(1, n_max + 1):
        if n in points:
            out.append(points[n])
            continue
        below = [m for m in known if m < n]
        above = [m for m in known if m > n]
        if below and above:
            a, b = below[-1], above[0]
            out.append(points[a] + (points[b] - points[a]) * (n - a) / (b - a))
        else:
            out.append(points[(below or above)[-1 if below else 0]])
    return out


def forward_costs_from_times(times: dict[str, Any], *, k: int) -> ForwardCosts | None:
    verify: dict[int, list[float]] = {}  # n -> [seconds, steps]
    draft_s = draft_steps = 0.0
    for key, b in (times.get("by_tokens") or {}).items():
        n = int(str(key).rstrip("m"))
        steps = float(b["steps"])
        if not 1 <= n <= k + 1 or steps <= 0:
            continue
        cell = verify.setdefault(n, [0.0, 0.0])
        cell[0] += float(b["execute_s"]) + float(b["sample_s"]) - float(b["propose_s"])
        cell[1] += steps
        if n == k + 1:
            draft_s += float(b["propose_s"])
            draft_steps += steps
    if k + 1 not in verify or draft_steps == 0:
        return None
    means = {n: s / c for n, (s, c) in verify.items()}
    target = monotone(_interpolate(means, k + 1))
    return ForwardCosts(target_s=tuple(max(t, 1e-9) for t in target), draft_s=draft_s / draft_steps / k,
                        backend="vllm")


def alpha_from_tokens_per_step(tau: float, k: int) -> float:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if tau >= k + 1:
        return 1.0
    if tau <= 1.0:
        return 0.0
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if expected_tokens_per_step(mid, k) < tau:
            low = mid
        else:
            high = mid
    return (low + high) / 2
