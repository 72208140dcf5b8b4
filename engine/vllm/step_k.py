"""StepK: each vLLM speculative step's draft length for the whole batch, chosen from the
batch's per-request acceptance and the worker's own measured step costs.

Contract (pure bookkeeping; the plugin feeds it from the worker, `engine.vllm.plugin`):
- `observe_acceptance(req_id, num_drafts=..., num_accepted=...)`: one verified step of one
  request (drafts proposed for it, drafts the target accepted). Per request a
  `engine.pacing.acceptance_model.DepthAcceptance` (depth-wise hazards, exponential forgetting),
  seeded from an engine-wide one (`shared`, fed by every request) as `engine.pacing.adaptive` does.
- `observe_step(tokens=..., verify_s=..., first_draft_s=..., draft_s=...)`: one runner step:
  `tokens` scheduled tokens took `verify_s` (target forward + rejection sampling, the draft
  loop excluded); the draft loop's first forward (the draft model catching up on the step's
  accepted tokens, which vLLM runs even at K=0 to keep the draft's KV cache in step) took
  `first_draft_s`, each further draft forward `draft_s` (None when the step drafted <= 1).
  Seconds are kept as exponentially weighted means (`decay` per step); the verify cost is a
  weighted least-squares line in the scheduled tokens (prefill steps included: they are what
  pins its slope when decode steps all schedule the same count), its slope never below 0.
- `costs(batch)`: those means as the torch engine's `engine.pacing.cost_model.ForwardCosts`
  (`target_s[n-1]` = verify cost of `batch * n` tokens, `draft_s` = one further draft forward).
  A step with k drafts costs `costs.step_s(k, draft_forwards=max(k - 1, 0)) + first_draft_s`
  (`step_s`): in vLLM the first draft forward is paid at every K, the other k-1 only when
  drafting k, and a k=0 step verifies no draft but still pays that first forward.
- `choose(req_ids)`: the k in [k_min, k_max] maximising expected tokens per second of the batch,
  sum over rows of `sampler.expected_tokens_from_hazards(row hazards, k)` / `step_s(k)`. Ties go
  to the larger k. Before any step has been timed, or while nothing is known of the acceptance
  (no request in the batch nor the engine observed), k_max (vLLM's configured K; it measures
  every depth). After `probe_every` steps in a row at k=0, one k=1 step re-measures the
  acceptance (a k=0 step verifies nothing and so observes nothing).
- `drop(req_ids)`: forget finished requests.

Invariants: k_min <= choose() <= k_max; no vLLM import; the math is
`engine.pacing.cost_model.ForwardCosts` + `sampler.expected_tokens_from_hazards`, not re-derived.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.pacing.acceptance_model import DepthAcceptance, seeded_acceptance
from engine.pacing.cost_model import ForwardCosts
from sampler import expected_tokens_from_hazards


@dataclass
class _Mean:
    """Exponentially weighted mean (None until the first value)."""

    decay: float
    value: float | None = None

    def add(self, x: float) -> None:
        self.value = x if self.value is None else self.decay * self.value + (1.0 - self.decay) * x


@dataclass
class _Line:
    """Exponentially weighted least-squares line y = a + b*x, b >= 0."""

    decay: float
    w: float = 0.0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0

    def add(self, x: float, y: float) -> None:
        d = self.decay
        self.w, self.sx, self.sy = d * self.w + 1.0, d * self.sx + x, d * self.sy + y
        self.sxx, self.sxy = d * self.sxx + x * x, d * self.sxy + x * y

    @property
    def known(self) -> bool:
        return self.w > 0.0

    def at(self, x: float) -> float:
        mx, my = self.sx / self.w, self.sy / self.w
        var = self.sxx / self.w - mx * mx
        slope = max((self.sxy / self.w - mx * my) / var, 0.0) if var > 1e-9 * max(1.0, mx * mx) else 0.0
        return my + slope * (x - mx)


class StepK:
    def __init__(self, *, k_max: int, k_min: int = 0, decay: float = 0.9, prior_alpha: float = 0.6,
                 acceptance_decay: float = 0.95, shared_decay: float = 0.98, pair_prior_weight: float = 4.0,
                 probe_every: int = 16) -> None:
        if k_max < 1:
            raise ValueError(f"k_max must be >= 1, got {k_max}")
        if not 0 <= k_min <= k_max:
            raise ValueError(f"k_min must be in [0, k_max], got {k_min}")
        self.k_max, self.k_min = k_max, k_min
        self.prior_alpha = prior_alpha
        self.acceptance_decay = acceptance_decay
        self.pair_prior_weight = pair_prior_weight
        self.probe_every = probe_every
        self.shared = DepthAcceptance(depth=k_max, prior_alpha=prior_alpha, decay=shared_decay)
        self._requests: dict[str, DepthAcceptance] = {}
        self.verify = _Line(decay)
        self.first_draft = _Mean(decay)
        self.draft = _Mean(decay)
        self.zero_in_row = 0

    # ---- observations ---------------------------------------------------------------------

    def _acceptance(self, req_id: str) -> DepthAcceptance:
        acc = self._requests.get(req_id)
        if acc is None:
            acc = self._requests[req_id] = seeded_acceptance(
                self.shared, depth=self.k_max, prior_alpha=self.prior_alpha, decay=self.acceptance_decay,
                pair_prior_weight=self.pair_prior_weight)
        return acc

    def observe_acceptance(self, req_id: str, *, num_drafts: int, num_accepted: int) -> None:
        if num_drafts < 1:
            return
        num_drafts = min(num_drafts, self.k_max)
        num_accepted = max(0, min(num_accepted, num_drafts))
        self._acceptance(req_id).observe(num_drafts=num_drafts, num_accepted=num_accepted)
        self.shared.observe(num_drafts=num_drafts, num_accepted=num_accepted)

    def observe_step(self, *, tokens: int, verify_s: float, first_draft_s: float | None,
                     draft_s: float | None) -> None:
        if tokens >= 1 and verify_s > 0:
            self.verify.add(float(tokens), verify_s)
        if first_draft_s is not None and first_draft_s >= 0:
            self.first_draft.add(first_draft_s)
        if draft_s is not None and draft_s >= 0:
            self.draft.add(draft_s)

    def drop(self, req_ids: Iterable[str]) -> None:
        for rid in req_ids:
            self._requests.pop(rid, None)

    # ---- the choice -----------------------------------------------------------------------

    def hazards(self, req_id: str) -> list[float]:
        return self._acceptance(req_id).hazards()

    def costs(self, batch: int) -> ForwardCosts | None:
        """The measured step costs at `batch` rows as ForwardCosts (None before any timing)."""
        if not self.verify.known or self.first_draft.value is None:
            return None
        target = tuple(max(self.verify.at(batch * n), 1e-9) for n in range(1, self.k_max + 2))
        draft = self.draft.value if self.draft.value is not None else self.first_draft.value
        return ForwardCosts(target_s=target, draft_s=max(draft, 0.0), backend="vllm")

    def step_s(self, k: int, costs: ForwardCosts) -> float:
        return costs.step_s(k, draft_forwards=max(k - 1, 0)) + (self.first_draft.value or 0.0)

    def rates(self, req_ids: Sequence[str]) -> dict[int, float] | None:
        """Expected tokens per second of the batch for each k in [k_min, k_max] (None: no costs)."""
        costs = self.costs(max(len(req_ids), 1))
        if costs is None or not req_ids:
            return None
        hazards = [self.hazards(rid) for rid in req_ids]
        return {k: sum(expected_tokens_from_hazards(h, k) for h in hazards) / self.step_s(k, costs)
                for k in range(self.k_min, self.k_max + 1)}

    def choose(self, req_ids: Sequence[str]) -> int:
        known = self.shared.observed or any(
            rid in self._requests and self._requests[rid].observed for rid in req_ids)
        rates = self.rates(req_ids) if known else None
        if rates is None:
            k = self.k_max
        else:
            k = max(rates, key=lambda j: (rates[j], j))
            if k == 0:
                self.zero_in_row += 1
                if self.zero_in_row > self.probe_every:
                    k = 1
        if k:
            self.zero_in_row = 0
        return k
