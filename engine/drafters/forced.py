"""Grammar-forced drafts: while the mask allows exactly one token, propose it (q one-hot,
no draft forward). Without a grammar it proposes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.drafters.base import EMPTY, Proposal, walk_forced_and_lookup

if TYPE_CHECKING:
    from engine.sequence import Sequence


class ForcedDrafter:
    name = "forced"

    def propose(self, seq: Sequence, *, k: int) -> Proposal:
        if seq.matcher is None or k <= 0:
            return EMPTY
        return walk_forced_and_lookup(seq, k=k, guess=None)


class NoDrafter:
    """No speculation (baseline): every step is one plain target step."""

    name = "none"

    def propose(self, seq: Sequence, *, k: int) -> Proposal:
        return EMPTY
