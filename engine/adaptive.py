"""Adaptive K: pick each step's draft length from the request's observed acceptance and the
measured draft / verify costs, and turn speculation off for a request where it cannot pay.

Model (Leviathan et al.): with per-token acceptance alpha, K drafts yield
`expected_tokens_per_step(alpha, K)` tokens per step at a cost of `c*K + verify_cost(K)`
plain target steps, so the speedup is `sampler.expected_speedup(alpha, K, c, verify_cost)`.
Costs are measured in seconds and expressed in units of one plain (K=0) target step, which
the controller measures by running one plain step early on. alpha is estimated as
accepted / (accepted + rejections) with exponential forgetting. When even the best K would
be slower than plain decoding, K=0; every `probe_every` plain steps one K=1 step re-probes.

Pure bookkeeping: knows nothing about models, grammars or requests.
"""

from __future__ import annotations

from sampler import expected_speedup


class AdaptiveK:
    def __init__(
        self, *, k_max: int, decay: float = 0.9, prior_alpha: float = 0.6, probe_every: int = 16
    ) -> None:
        if k_max < 1:
            raise ValueError(f"k_max must be >= 1, got {k_max}")
        self.k_max = k_max
        self.decay = decay
        self.accepted = prior_alpha * 2.0  # pseudo-counts: a weak prior
        self.rejected = (1.0 - prior_alpha) * 2.0
        self.probe_every = probe_every
        self.plain_step_s: float | None = None
        self.draft_token_s: float | None = None
        self.verify_extra_s_per_token: float | None = None  # verify time beyond a plain step, per draft
        self.plain_steps_in_row = 0
        self.steps = 0

    @property
    def alpha(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else self.decay * old + (1 - self.decay) * new

    def observe(
        self, *, k: int, num_drafts: int, num_accepted: int, draft_s: float, target_s: float
    ) -> None:
        """Record one step: drafts verified, accepted, and its draft / target seconds."""
        self.steps += 1
        if num_drafts == 0:
            self.plain_step_s = self._ema(self.plain_step_s, target_s)
            self.plain_steps_in_row += 1
            return
        self.plain_steps_in_row = 0
        self.accepted = self.decay * self.accepted + num_accepted
        self.rejected = self.decay * self.rejected + (1.0 if num_accepted < num_drafts else 0.0)
        self.draft_token_s = self._ema(self.draft_token_s, draft_s / num_drafts)
        if self.plain_step_s is not None:
            extra = max(target_s - self.plain_step_s, 0.0) / num_drafts
            self.verify_extra_s_per_token = self._ema(self.verify_extra_s_per_token, extra)

    def choose_k(self) -> int:
        if self.steps == 0:
            return self.k_max  # the first step is mostly prefill
        if self.plain_step_s is None:
            return 0  # measure one plain step
        if self.draft_token_s is None:
            return self.k_max
        unit = self.plain_step_s
        c = self.draft_token_s / unit
        extra = (self.verify_extra_s_per_token or 0.0) / unit
        best_k, best = 0, 1.0
        for k in range(1, self.k_max + 1):
            speed = expected_speedup(self.alpha, k, c, 1.0 + extra * k)
            if speed > best:
                best_k, best = k, speed
        if best_k == 0 and self.plain_steps_in_row >= self.probe_every:
            return 1
        return best_k
