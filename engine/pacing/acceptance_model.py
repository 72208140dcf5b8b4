"""Depth-wise acceptance of one request's drafts: h_j = P(draft j accepted | drafts 0..j-1 were).

Why not one alpha: in structured output acceptance is not i.i.d. across a step's drafts.
Within a JSON value or a key the draft is either in step with the target for a long run or
not, so a step that got past its first drafts is likelier to go on (h rises with depth), and
the i.i.d. geometric model (one alpha = accepted / (accepted + rejections), Leviathan et al.)
undervalues long K exactly where it pays most. The expected tokens of a K-draft step are
`1 + sum_{i<K} prod_{j<=i} h_j` (`sampler.expected_tokens_from_hazards`).

Estimate (per request, pure counting):
- each verified step with n drafts and a accepted adds 1 to `reached[j]` for j = 0..min(a, n-1)
  and 1 to `accepted[j]` for j < a (depth a, when a < n, is the rejection);
- all counts are multiplied by `decay` per observed step (recent steps weigh more);
- `hazards()`: h_j = (accepted_j + w0*p_j + w*h_{j-1}) / (reached_j + w0 + w) (no w term at
  j = 0): p_j is the prior (`prior`: depth-wise hazards, e.g. the pair's from earlier requests,
  `AcceptancePriors`; else `prior_alpha` at every depth) whose weight w0 fades with the same
  decay (a pseudo-count), and w (`shrink_weight`, constant) leans depth j on the depth above:
  a depth never reached inherits the estimate above it (extrapolation beyond observed
  depths), a depth seen often speaks for itself. With i.i.d. acceptance every h_j estimates
  the same alpha, so K is chosen as the geometric model would (up to noise).
- `alpha`: the pooled i.i.d. estimate over the same decayed counts (for reporting).

`AcceptancePriors`: one slowly forgetting `DepthAcceptance` per drafter kind, shared by an
engine's requests, whose hazards are the prior of each new request (a pair that agrees on 95%
of structured tokens starts every request near 0.95, not at a generic 0.6). Asked with a
grammar `family` (what generalizes across schemas: "sql_schema:sqlite", "json_schema",
"tools:auto", "text"; never a schema's hash), it gives a `FamilyAcceptance`: the family's own
estimate once the family has been observed, the drafter kind's until then (a new family starts
from the pair, a new schema of a known family from its family). Every step feeds both. At most
`max_families` families per drafter kind are kept, the least recently used dropped first.

Knows nothing about costs, models or grammars; returns numbers, logs nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol


class DepthAcceptance:
    def __init__(self, *, depth: int, prior_alpha: float = 0.6, prior: Sequence[float] | None = None,
                 prior_weight: float = 1.0, decay: float = 0.95, shrink_weight: float = 3.0) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        if not 0.0 < prior_alpha < 1.0:
            raise ValueError(f"prior_alpha must be in (0, 1), got {prior_alpha}")
        if prior is not None and (not prior or any(not 0.0 <= p <= 1.0 for p in prior)):
            raise ValueError(f"prior must be hazards in [0, 1], got {prior}")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.depth = depth
        self.decay = decay
        self.prior_alpha = prior_alpha
        self.prior = [prior[min(j, len(prior) - 1)] for j in range(depth)] if prior is not None else [prior_alpha] * depth
        self.prior_weight = prior_weight  # decays with the counts: a pseudo-count
        self.shrink_weight = shrink_weight  # constant: how strongly depth j leans on depth j-1
        self.reached = [0.0] * depth
        self.accepted = [0.0] * depth
        self.rejections = 0.0

    def observe(self, *, num_drafts: int, num_accepted: int) -> None:
        """Record one verified step (num_drafts >= 1 drafts, num_accepted of them accepted)."""
        if num_drafts < 1 or not 0 <= num_accepted <= num_drafts:
            raise ValueError(f"need 1 <= num_drafts and 0 <= num_accepted <= num_drafts, "
                             f"got {num_drafts}, {num_accepted}")
        d = self.decay
        self.prior_weight *= d
        self.rejections *= d
        for j in range(self.depth):
            self.reached[j] *= d
            self.accepted[j] *= d
        for j in range(min(num_accepted + 1, num_drafts, self.depth)):
            self.reached[j] += 1.0
        for j in range(min(num_accepted, self.depth)):
            self.accepted[j] += 1.0
        if num_accepted < num_drafts:
            self.rejections += 1.0

    @property
    def observed(self) -> bool:
        """Whether any verified step has been recorded."""
        return self.reached[0] > 0.0

    def hazards(self) -> list[float]:
        """h_0..h_{depth-1}, each in (0, 1)."""
        out: list[float] = []
        w0 = self.prior_weight
        for j in range(self.depth):
            w = self.shrink_weight if j else 0.0
            above = out[-1] if j else 0.0
            total = self.reached[j] + w0 + w
            out.append((self.accepted[j] + w0 * self.prior[j] + w * above) / total if total > 0 else self.prior[j])
        return out

    @property
    def alpha(self) -> float:
        """Pooled per-draft acceptance accepted / (accepted + rejections), prior included."""
        accepted = sum(self.accepted) + self.prior_weight * self.prior[0]
        return accepted / (accepted + self.rejections + self.prior_weight * (1.0 - self.prior[0]))


class SharedAcceptance(Protocol):
    """What a request's estimate reads from an engine-wide one and feeds back."""

    @property
    def observed(self) -> bool: ...

    def hazards(self) -> list[float]: ...

    def observe(self, *, num_drafts: int, num_accepted: int) -> None: ...


def seeded_acceptance(shared: SharedAcceptance | None, *, depth: int, prior_alpha: float, decay: float,
                      pair_prior_weight: float) -> DepthAcceptance:
    """A new request's depth-wise acceptance seeded by the pair's engine-wide one (`shared`):
    its hazards as the prior, weighing `pair_prior_weight` steps once the pair has been
    observed and one step before (`prior_alpha` alone without `shared`)."""
    informed = shared is not None and shared.observed
    return DepthAcceptance(depth=depth, prior_alpha=prior_alpha, decay=decay,
                           prior=shared.hazards() if shared is not None else None,
                           prior_weight=pair_prior_weight if informed else 1.0)


class FamilyAcceptance:
    """One grammar family's engine-wide acceptance beside its drafter kind's: hazards from the
    family once it has been observed, else from the kind; `observe` feeds both."""

    def __init__(self, family: DepthAcceptance, kind: DepthAcceptance) -> None:
        self.family = family
        self.kind = kind

    @property
    def observed(self) -> bool:
        return self.family.observed or self.kind.observed

    def hazards(self) -> list[float]:
        return self.family.hazards() if self.family.observed else self.kind.hazards()

    @property
    def alpha(self) -> float:
        return self.family.alpha if self.family.observed else self.kind.alpha

    def observe(self, *, num_drafts: int, num_accepted: int) -> None:
        self.family.observe(num_drafts=num_drafts, num_accepted=num_accepted)
        self.kind.observe(num_drafts=num_drafts, num_accepted=num_accepted)


class AcceptancePriors:
    """Per drafter kind (and, asked with one, per grammar family), the engine-wide depth-wise
    acceptance (slow forgetting) that seeds each new request's `DepthAcceptance`; every
    request's steps feed it."""

    def __init__(self, *, depth: int, prior_alpha: float = 0.6, decay: float = 0.98, max_families: int = 64) -> None:
        if max_families < 1:
            raise ValueError(f"max_families must be >= 1, got {max_families}")
        self.depth = depth
        self.prior_alpha = prior_alpha
        self.decay = decay
        self.max_families = max_families
        self._by_kind: dict[str, DepthAcceptance] = {}
        self._by_family: dict[str, OrderedDict[str, DepthAcceptance]] = {}

    def shared(self, kind: str, family: str | None = None) -> SharedAcceptance:
        """The engine-wide estimate for drafter `kind` (created at `prior_alpha`), or with
        `family` that family's under this drafter kind (`FamilyAcceptance`)."""
        if kind not in self._by_kind:
            self._by_kind[kind] = DepthAcceptance(depth=self.depth, prior_alpha=self.prior_alpha, decay=self.decay)
        pooled = self._by_kind[kind]
        if family is None:
            return pooled
        families = self._by_family.setdefault(kind, OrderedDict())
        if family not in families:
            families[family] = DepthAcceptance(  # a new family starts where the drafter kind stands
                depth=self.depth, prior_alpha=self.prior_alpha, decay=self.decay,
                prior=pooled.hazards() if pooled.observed else None)
            while len(families) > self.max_families:
                families.popitem(last=False)
        families.move_to_end(family)
        return FamilyAcceptance(families[family], pooled)

    def families(self, kind: str) -> list[str]:
        """The families kept for drafter `kind`, least recently used first."""
        return list(self._by_family.get(kind, ()))
