"""The request's transform T, bound once per sequence: the ONE place where draft and target
distributions are computed.

`RequestTransform.probs(logits, bitmask)` = `sampler.probs_from_logits` with this request's
sampling parameters (temperature, top-k, top-p, min-p) and vocabulary limit; the decoder calls
it on the target's logits (p) and the model drafter on the draft's logits (q), with the same
mask rows, so q and p come from the same function with the same parameters by construction
(docs/architecture.md, the invariant). `one_hot(token_ids)` is q for model-free or argmax drafts.
Pure torch; knows nothing of models or grammars.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.types import SamplingOptions
from sampler import probs_from_logits


@dataclass(frozen=True)
class RequestTransform:
    sampling: SamplingOptions
    vocab_limit: int   # ids >= this are never sampled (the tokenizer's vocabulary)
    width: int         # V of the logits (model padding included)

    def probs(self, logits: torch.Tensor, bitmask: torch.Tensor | None) -> torch.Tensor:
        """logits [N, V], bitmask int32 [N, W] or None → float32 [N, V] (MaskDeadEndError
        when a row allows nothing)."""
        s = self.sampling
        return probs_from_logits(
            logits, bitmask=bitmask, vocab_size=self.vocab_limit,
            temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p,
        )

    def one_hot(self, token_ids: Sequence[int]) -> torch.Tensor:
        """float32 [n, V]: row i is one-hot at token_ids[i]."""
        rows = torch.zeros(len(token_ids), self.width, dtype=torch.float32)
        if token_ids:
            rows[torch.arange(len(token_ids)), torch.tensor(list(token_ids), dtype=torch.long)] = 1.0
        return rows
