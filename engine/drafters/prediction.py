"""OpenAI Predicted Outputs: the client's predicted text drives the drafts (q one-hot).

Alignment is by tokens: while the output so far is a prefix of the tokenized prediction the
next predicted tokens are proposed; after a divergence, the last n output tokens are looked
up in the prediction (like prompt lookup) to re-align. Grammar-forced tokens are free, and
a predicted token the grammar refuses ends the proposal.
"""

from __future__ import annotations

import torch

from engine.drafters.base import DraftContext, Proposal, walk_forced_and_lookup
from engine.drafters.lookup import lookup_continuation


class PredictionDrafter:
    name = "prediction"

    def __init__(self, prediction_token_ids: list[int], *, n_max: int = 4, n_min: int = 2) -> None:
        self.prediction = prediction_token_ids
        self.corpus = torch.tensor(prediction_token_ids, dtype=torch.long)  # [L]
        self.n_max = n_max
        self.n_min = n_min

    def continuation(self, output: list[int], *, k: int) -> list[int]:
        if output == self.prediction[: len(output)]:
            return self.prediction[len(output) : len(output) + k]
        return lookup_continuation(
            output, self.corpus, n_max=self.n_max, n_min=self.n_min, k=k, exclude_tail=False
        )

    def propose(self, ctx: DraftContext, *, k: int, span: int = 0) -> Proposal:
        if k <= 0 or not self.prediction:
            return Proposal()
        return walk_forced_and_lookup(
            ctx, k=k, guess=lambda drafts: self.continuation(ctx.output_ids + drafts, k=k)
        )
