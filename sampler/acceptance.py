"""Acceptance statistics and the speculative-decoding cost model (pure arithmetic).

Terms: a *step* is one verification of one request (one row of ``rejection_sample``); it emits
``num_accepted + 1`` tokens (accepted drafts plus one recovered or bonus token).

- ``expected_tokens_per_step(alpha, k) = (1 - alpha**(k+1)) / (1 - alpha)`` (``k + 1`` at
  ``alpha = 1``): the mean tokens per step when each draft is accepted independently with
  probability ``alpha`` (Leviathan et al. 2023, eq. 1).
- ``expected_tokens_from_hazards(hazards, k) = 1 + sum_{i<k} prod_{j<=i} hazards[j]``: the
  same mean where acceptance depends on the draft's depth in the step: ``hazards[j]`` is the
  probability that draft ``j`` (0-based) is accepted given drafts ``0..j-1`` were; depths past
  the list repeat its last entry. ``hazards=[alpha]`` gives ``expected_tokens_per_step``.
- ``expected_speedup(alpha, k, c, verify_cost=1.0)``: that divided by the step's cost
  ``c*k + verify_cost`` in units of one plain target step (``c`` = cost of one draft step);
  ``expected_speedup_from_hazards`` the same over depth-wise hazards.
- ``AcceptanceStats``: running counters; returns numbers, never logs or exports.

This module does not know about tensors' origin, requests or metrics backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Mean emitted tokens per step with per-draft acceptance ``alpha`` and ``k`` drafts."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_tokens_from_hazards(hazards: Sequence[float], k: int) -> float:
    """Mean emitted tokens per step with ``k`` drafts and depth-wise acceptance ``hazards``."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if k > 0 and not hazards:
        raise ValueError("hazards must have at least one entry when k > 0")
    if any(not 0.0 <= h <= 1.0 for h in hazards):
        raise ValueError(f"hazards must be in [0, 1], got {list(hazards)}")
    tokens, survive = 1.0, 1.0
    for i in range(k):
        survive *= hazards[min(i, len(hazards) - 1)]
        tokens += survive
    return tokens


def _step_cost(k: int, c: float, verify_cost: float) -> float:
    if c < 0:
        raise ValueError(f"c (draft cost per token) must be >= 0, got {c}")
    if verify_cost <= 0:
        raise ValueError(f"verify_cost must be > 0, got {verify_cost}")
    return c * k + verify_cost


def expected_speedup(alpha: float, k: int, c: float, verify_cost: float = 1.0) -> float:
    """``expected_tokens_per_step(alpha, k) / (c*k + verify_cost)``."""
    cost = _step_cost(k, c, verify_cost)
    return expected_tokens_per_step(alpha, k) / cost


def expected_speedup_from_hazards(hazards: Sequence[float], k: int, c: float, verify_cost: float = 1.0) -> float:
    """``expected_tokens_from_hazards(hazards, k) / (c*k + verify_cost)``."""
    cost = _step_cost(k, c, verify_cost)
    return expected_tokens_from_hazards(hazards, k) / cost


def _as_int_list(name: str, values: torch.Tensor | Sequence[int] | int) -> list[int]:
    if isinstance(values, torch.Tensor):
        return [int(v) for v in values.reshape(-1).tolist()]
    if isinstance(values, int):
        return [values]
    return [int(v) for v in values]


@dataclass
class AcceptanceStats:
    """Counters over steps; ``per_position_*[i]`` counts drafts at 0-based position ``i``."""

    drafted: int = 0
    accepted: int = 0
    steps: int = 0
    per_position_drafted: list[int] = field(default_factory=list)
    per_position_accepted: list[int] = field(default_factory=list)

    def update(
        self,
        num_draft_tokens: torch.Tensor | Sequence[int] | int,  # [B]
        num_accepted: torch.Tensor | Sequence[int] | int,  # [B]
    ) -> AcceptanceStats:
        """Add one step per row; returns ``self``. Rows need ``0 <= accepted <= drafted``."""
        drafted = _as_int_list("num_draft_tokens", num_draft_tokens)
        accepted = _as_int_list("num_accepted", num_accepted)
        if len(drafted) != len(accepted):
            raise ValueError(
                f"num_draft_tokens has {len(drafted)} rows but num_accepted has {len(accepted)}"
            )
        for n, a in zip(drafted, accepted, strict=True):
            if not 0 <= a <= n:
                raise ValueError(
                    f"need 0 <= num_accepted <= num_draft_tokens, got {a} > {n}"
                    if a > n
                    else f"counts must be >= 0, got drafted={n}, accepted={a}"
                )
        self._grow(max(drafted, default=0))
        for n, a in zip(drafted, accepted, strict=True):
            for i in range(n):
                self.per_position_drafted[i] += 1
            for i in range(a):
                self.per_position_accepted[i] += 1
        self.drafted += sum(drafted)
        self.accepted += sum(accepted)
        self.steps += len(drafted)
        return self

    def _grow(self, length: int) -> None:
        for counts in (self.per_position_drafted, self.per_position_accepted):
            counts.extend([0] * (length - len(counts)))

    def merge(self, other: AcceptanceStats) -> AcceptanceStats:
        """Add ``other``'s counters into ``self``; returns ``self``."""
        self._grow(max(len(other.per_position_drafted), len(other.per_position_accepted)))
        for i, v in enumerate(other.per_position_drafted):
            self.per_position_drafted[i] += v
        for i, v in enumerate(other.per_position_accepted):
            self.per_position_accepted[i] += v
        self.drafted += other.drafted
        self.accepted += other.accepted
        self.steps += other.steps
        return self

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted (0.0 before any draft)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Mean accepted drafts per step (0.0 before any step)."""
        return self.accepted / self.steps if self.steps else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Mean emitted tokens per step: ``(accepted + steps) / steps`` (0.0 before any step)."""
        return (self.accepted + self.steps) / self.steps if self.steps else 0.0

    @property
    def per_position_acceptance_rate(self) -> list[float]:
        """Accepted / drafted at each 0-based draft position."""
        return [
            a / d if d else 0.0
            for a, d in zip(self.per_position_accepted, self.per_position_drafted, strict=False)
        ]

    def as_dict(self) -> dict[str, Any]:
        """Counters and derived rates as plain JSON-able values."""
        return {
            "drafted": self.drafted,
            "accepted": self.accepted,
            "steps": self.steps,
            "per_position_drafted": list(self.per_position_drafted),
            "per_position_accepted": list(self.per_position_accepted),
            "acceptance_rate": self.acceptance_rate,
            "mean_accepted_length": self.mean_accepted_length,
            "tokens_per_step": self.tokens_per_step,
        }
