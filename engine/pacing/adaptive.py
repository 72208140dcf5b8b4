"""Adaptive K: pick each step's draft length from the request's observed acceptance and the
machine's measured forward costs, and turn speculation off where it cannot pay.

Model: K drafts yield `1 + sum_{i<K} prod_{j<=i} h_j` tokens per step at a cost of `c*K + v_K`
plain target steps, where h_j is the request's depth-wise acceptance
(`engine.pacing.acceptance_model.DepthAcceptance`: per-depth counts with exponential forgetting,
a weak prior, depths never reached extrapolated from the one above). With i.i.d. acceptance
this is Leviathan et al.'s geometric model; where acceptance is bursty (a step that got past
its first drafts goes on) it values long K as it should (on the real pair the measured
acceptance is nearly flat by depth: docs/speculation.md, "Adaptive K"). `alpha` is the
pooled i.i.d. estimate, kept for reporting. `shared` (an engine-wide `DepthAcceptance` for this drafter kind,
`engine.pacing.acceptance_model.AcceptancePriors`): its hazards are the request's prior and every
observed step feeds it, so a request starts from the pair's acceptance, not a generic 0.6
(the decoder passes its grammar family's, `AcceptancePriors.shared(kind, family)`: a new
schema starts from its family's acceptance).
Once the pair has been observed, that prior weighs `pair_prior_weight` steps (4), not the
generic prior's 1: with a weight of 1, one rejected first step (h_0 = 0.84 -> 0.41) switched
a Text2SQL request's drafting off for 16 steps although the pair accepts 84% of its drafts.
While nothing at all is known about the pair (no step of this request, none in `shared`), a
drafting step that the prior says pays runs at K_max: it measures the acceptance at every
depth at once (at most c·(K_max-1) plain steps lost, once per engine and drafter kind, where
the generic prior would ramp K up over several steps).

With `costs` (an `engine.pacing.cost_model.ForwardCosts` measured once per machine and shared by
every request), K is `costs.best_k(hazards)` from the very first step: no per-request warm-up.
Model-free drafts (`free_drafts`: n-gram, Predicted Outputs, grammar-forced) cost no draft
forward, so they are priced with c = 0. Before the draft model's first drafting step it must
prefill the prompt (the catch-up: `costs.draft_prefill_cost_s(catch_up_tokens)`). Drafting
saves `plain_s × (1 - 1/speedup)` per token still to come, so whether the catch-up pays
depends on the remaining length, which is not known; in order:
1. where even running to its limit (`room` tokens) would not save the catch-up, the request
   never drafts (a 6-token SQL query with max_tokens 8 never pays a 300-token prefill);
2. while the engine's record of finished outputs like this one (`expected_remaining`,
   `engine.pacing.output_lengths`) covers the request (some recorded output ran longer), the record
   decides: the draft prefills as soon as the expected remaining tokens save more than the
   catch-up, and not before (learning-augmented rental: the record replaces the guess);
3. otherwise (nothing recorded, the request has run past every recorded output, or no
   acceptance of the pair has been observed yet, so the saving per token is a guess) the
   ski-rental rule: a request decodes plainly until its plain steps since the record stopped
   covering it have cost the catch-up (both in the measured costs' seconds, so load that came
   after the measurement does not shift the decision), then starts drafting (a short answer
   never pays the prefill, and a long one loses at most that much time, at most 2x the best
   choice in hindsight).
Once the draft has drafted, its prefill is sunk: later catch-ups are the few tokens since its
last step, fed with its next forward, and no rental applies.
Where `costs.pays_at_all` is False (even perfect acceptance cannot pay) K is always 0. Where
the current estimate makes every K lose, K is 0, and every `probe_every` plain steps one K=1
step re-probes the acceptance.

Grammar-forced span tokens (`span_tokens`) cost no draft forward but lengthen the verify: the
n-th one beyond the chain's K drafts is added while its chance of being judged and accepted,
`forced_alpha ** n` (the forced tokens' own acceptance, `observe_forced`, an EMA per judged
token from a prior of 0.9), is at least the verify's marginal cost
`v_{K+n} - v_{K+n-1}` in plain steps: its expected tokens at least pay its time. Flat verify
costs (a GPU, a CPU with native bf16) take the whole limit; a CPU whose forward grows with
every token takes one or none. Without `costs` the limit is taken.

Without `costs` (a decoder built without a cost model, e.g. in tests), the costs are learned
online from the request's own steps: the first decode step is plain to time a plain step,
then drafts and verify extras are timed as they run.

Pure bookkeeping: knows nothing about models, grammars or requests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.pacing.acceptance_model import SharedAcceptance, seeded_acceptance
from sampler import expected_speedup_from_hazards

if TYPE_CHECKING:
    from engine.pacing.cost_model import ForwardCosts


FORCED_PRIOR = 0.9  # a grammar-forced draft's acceptance before any is judged
FORCED_DECAY = 0.95


class AdaptiveK:
    def __init__(
        self, *, k_max: int, costs: ForwardCosts | None = None, free_drafts: bool = False, decay: float = 0.9,
        prior_alpha: float = 0.6, probe_every: int = 16, shared: SharedAcceptance | None = None,
        acceptance_decay: float = 0.95, pair_prior_weight: float = 4.0,
    ) -> None:
        if k_max < 1:
            raise ValueError(f"k_max must be >= 1, got {k_max}")
        self.k_max = k_max
        self.costs = costs
        self.decay = decay
        self.shared = shared
        self.acceptance = seeded_acceptance(shared, depth=k_max, prior_alpha=prior_alpha, decay=acceptance_decay,
                                            pair_prior_weight=pair_prior_weight)
        self.probe_every = probe_every
        self.plain_step_s: float | None = None
        self.draft_token_s: float | None = None
        self.verify_extra_s_per_token: float | None = None  # verify time beyond a plain step, per draft
        self.plain_steps_in_row = 0
        self.plain_time_s = 0.0  # seconds of plain decode steps so far (the first, prefill step excluded)
        self.steps = 0
        self.free_drafts = free_drafts  # model-free drafter (n-gram, prediction, forced): c = 0
        self.drafted = False  # a drafting step ran: the draft's prompt prefill is sunk
        self.rent_from_s = 0.0  # plain_time_s when the ski rental (re)started
        self.never = costs is not None and not (costs.free_drafts_pay() if free_drafts else costs.pays_at_all)
        self.forced_alpha = FORCED_PRIOR  # grammar-forced drafts' acceptance (EMA per judged token)

    @property
    def alpha(self) -> float:
        """Pooled i.i.d. acceptance estimate (reporting; K follows `hazards`)."""
        return self.acceptance.alpha

    def hazards(self) -> list[float]:
        """Depth-wise acceptance h_0..h_{k_max-1} (see `engine.pacing.acceptance_model`)."""
        return self.acceptance.hazards()

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else self.decay * old + (1 - self.decay) * new

    def observe(
        self, *, k: int, num_drafts: int, num_accepted: int, draft_s: float, target_s: float
    ) -> None:
        """Record one step: drafts verified, accepted, and its draft / target seconds."""
        self.steps += 1
        first = self.steps == 1  # carries the prompt's prefill: its times say nothing about a step
        if num_drafts == 0:
            if first:
                return
            self.plain_step_s = self._ema(self.plain_step_s, target_s)
            # in the cost model's units, like the catch-up it is weighed against: on a machine
            # busier now than when the costs were measured, wall seconds would end the rental early
            self.plain_time_s += self.costs.plain_s if self.costs is not None else target_s
            self.plain_steps_in_row += 1
            return
        self.plain_steps_in_row = 0
        self.drafted = True
        self.acceptance.observe(num_drafts=num_drafts, num_accepted=num_accepted)
        if self.shared is not None:
            self.shared.observe(num_drafts=num_drafts, num_accepted=num_accepted)
        if first:
            return
        self.draft_token_s = self._ema(self.draft_token_s, draft_s / num_drafts)
        if self.plain_step_s is not None:
            extra = max(target_s - self.plain_step_s, 0.0) / num_drafts
            self.verify_extra_s_per_token = self._ema(self.verify_extra_s_per_token, extra)

    def observe_forced(self, *, judged: int, accepted: int) -> None:
        """One step's grammar-forced drafts: `judged` reached the verify's judgement (a
        rejection before them leaves the rest unjudged), `accepted` of them were accepted."""
        for outcome in [1.0] * accepted + [0.0] * (judged - accepted):
            self.forced_alpha = FORCED_DECAY * self.forced_alpha + (1 - FORCED_DECAY) * outcome

    def span_tokens(self, *, k: int, limit: int) -> int:
        """Grammar-forced tokens worth adding beyond `k` drafts, at most `limit` (docstring)."""
        if self.costs is None:
            return limit
        n = 0
        while n < limit:
            marginal = self.costs.verify_ratio(k + n + 1) - self.costs.verify_ratio(k + n)
            if self.forced_alpha ** (n + 1) < marginal:
                break
            n += 1
        return n

    def _probe(self, best_k: int) -> int:
        if best_k == 0 and self.plain_steps_in_row >= self.probe_every:
            return 1
        return best_k

    def choose_k(self, *, catch_up_tokens: int = 0, room: int | None = None,
                 expected_remaining: float | None = None) -> int:
        """K for the next step. `catch_up_tokens`: tokens the draft model would have to prefill
        first (the whole prompt before its first drafting step); `room`: tokens the request may
        still emit (max_tokens, context); `expected_remaining`: the engine's prediction of the
        tokens still to come (None: nothing recorded)."""
        if self.costs is not None:
            if self.never:
                return 0
            best_k, speed = self.costs.best_k(self.hazards(), k_max=self.k_max, free_drafts=self.free_drafts)
            known = self.acceptance.observed or (self.shared is not None and self.shared.observed)
            if not self.free_drafts and not self.drafted and not self._catch_up_pays(
                    self.costs.draft_prefill_cost_s(catch_up_tokens), best_k=best_k if known else 0, speed=speed,
                    room=room, expected_remaining=expected_remaining):
                return 0
            if best_k and not known:
                return self.k_max  # nothing known about this pair yet: one step at K_max measures every depth
            return self._probe(best_k)
        return self._choose_online()

    def _catch_up_pays(self, catch_up_s: float, *, best_k: int, speed: float, room: int | None,
                       expected_remaining: float | None) -> bool:
        """Whether to pay the draft's prompt prefill now (the rules 1-3 of the module docstring)."""
        if catch_up_s <= 0:
            return True
        assert self.costs is not None
        if best_k:  # best_k == 0 (or no acceptance observed yet): the rental, then a probe re-measures it
            saving_per_token = self.costs.plain_s * (1.0 - 1.0 / speed)
            if room is not None and room * saving_per_token <= catch_up_s:
                return False
            if expected_remaining is not None:  # the record covers this request: it decides
                self.rent_from_s = self.plain_time_s  # a rental, if one follows, starts where the record stops
                return expected_remaining * saving_per_token > catch_up_s
        return self.plain_time_s - self.rent_from_s >= catch_up_s

    def _choose_online(self) -> int:
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
        hazards = self.hazards()
        for k in range(1, self.k_max + 1):
            speed = expected_speedup_from_hazards(hazards, k, c, 1.0 + extra * k)
            if speed > best:
                best_k, best = k, speed
        return self._probe(best_k)
