"""Grammar-forced drafts: while the mask allows exactly one token, propose it (q one-hot,
no draft forward). Without a grammar it proposes nothing."""

from __future__ import annotations

from engine.drafters.base import DraftContext, Proposal, walk_forced_and_lookup


class ForcedDrafter:
    name = "forced"

    def propose(self, ctx: DraftContext, *, k: int, span: int = 0) -> Proposal:
        if ctx.matcher is None or k <= 0:
            return Proposal()
        return walk_forced_and_lookup(ctx, k=k, guess=None)


class NoDrafter:
    """No speculation (baseline): every step is one plain target step."""

    name = "none"

    def propose(self, ctx: DraftContext, *, k: int, span: int = 0) -> Proposal:
        return Proposal()
