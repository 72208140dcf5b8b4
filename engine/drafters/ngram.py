"""Prompt-lookup (n-gram) drafts: continue the sequence the way an earlier occurrence of its
last n tokens continued in the prompt + output (model-free, q one-hot). Grammar-forced tokens
are proposed for free; a guess the grammar refuses ends the proposal (never proposed)."""

from __future__ import annotations

import torch

from engine.drafters.base import DraftContext, Proposal, walk_forced_and_lookup
from engine.drafters.lookup import lookup_continuation


class NgramDrafter:
    name = "ngram"

    def __init__(self, *, n_max: int = 3, n_min: int = 1) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError(f"ngram sizes need 1 <= n_min <= n_max, got {n_min}, {n_max}")
        self.n_max = n_max
        self.n_min = n_min

    def propose(self, ctx: DraftContext, *, k: int, span: int = 0) -> Proposal:
        if k <= 0:
            return Proposal()

        def guess(drafts: list[int]) -> list[int]:
            context = ctx.tokens + drafts
            corpus = torch.tensor(context, dtype=torch.long)
            return lookup_continuation(
                context, corpus, n_max=self.n_max, n_min=self.n_min, k=k, exclude_tail=True
            )

        return walk_forced_and_lookup(ctx, k=k, guess=guess)
