"""Draft-model drafter: K autoregressive steps of a small model on its own KV cache.

Masked mode (default): at every draft step the matcher fills the mask for the current
state, the draft distribution is q = T(draft_logits, mask) with the request's sampling
parameters (the same T as the target's), the draft is sampled from q with the request's
generator, and the matcher advances; at the end it rolls back by exactly the advances. A
position whose mask allows one token is forced: it needs no draft forward for its choice
(q is one-hot there, which is what the masked T gives anyway); the token is fed to the draft
cache together with the next forward's input.

Unmasked mode (`masked=False`, what other engines do): drafts come from the raw logits,
`unmasked_mode="argmax"` (q one-hot, vLLM's default; a refused draft is truncated, which is
exact because a one-hot q on a refused token leaves residual = p) or "sample" (q = T without
mask; a refused draft ends the proposal and is kept for verification, which rejects it with
certainty and recovers from norm((p - q)+), keeping the law exact).

The draft cache lives on the sequence (`seq.draft_kv`); it is synced to the committed
tokens (crop to the common prefix) at the start of every proposal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch

from engine.drafters.base import Proposal
from engine.masks import forced_token, token_allowed
from sampler import probs_from_logits, sample_from_probs

if TYPE_CHECKING:
    from engine.sequence import Sequence


class ModelDrafter:
    name = "model"

    def __init__(self, *, masked: bool = True, unmasked_mode: Literal["argmax", "sample"] = "argmax") -> None:
        self.masked = masked
        self.unmasked_mode = unmasked_mode

    def propose(self, seq: Sequence, *, k: int) -> Proposal:
        kv = seq.draft_kv
        if kv is None:
            raise RuntimeError("ModelDrafter needs a sequence with a draft KV cache")
        if k <= 0:
            return Proposal(token_ids=[])
        pending = kv.sync_to(seq.tokens)
        if not pending:  # everything cached: re-feed the last token to get its logits
            kv.crop(len(kv) - 1)
            pending = [seq.tokens[-1]]
        matcher = seq.matcher
        sampling = seq.request.sampling
        width = seq.logits_width
        drafts: list[int] = []
        rows: list[torch.Tensor] = []  # each [V] float32
        advanced = 0
        forwards = 0
        ends_refused = False
        mask = seq.draft_bitmask[0:1]  # int32 [1, W]
        try:
            while len(drafts) < k:
                if matcher is not None and matcher.is_terminated():
                    break
                if matcher is not None:
                    matcher.fill_mask(seq.draft_bitmask, row=0)
                forced = forced_token(mask[0]) if (self.masked and matcher is not None) else None
                if forced is not None:
                    token = forced
                    row = torch.zeros(width, dtype=torch.float32)
                    row[token] = 1.0
                else:
                    logits = kv.extend(pending)  # [1, V]
                    forwards += 1
                    pending = []
                    if self.masked or self.unmasked_mode == "sample":
                        probs = probs_from_logits(
                            logits,
                            bitmask=mask if (self.masked and matcher is not None) else None,
                            vocab_size=seq.vocab_limit,
                            temperature=sampling.temperature,
                            top_k=sampling.top_k,
                            top_p=sampling.top_p,
                            min_p=sampling.min_p,
                        )  # [1, V]
                        token = int(sample_from_probs(probs, generator=seq.generator)[0])
                        row = probs[0]
                    else:
                        token = int(logits[0, : seq.vocab_limit].argmax())
                        row = torch.zeros(width, dtype=torch.float32)
                        row[token] = 1.0
                    if matcher is not None and not self.masked and not token_allowed(mask[0], token):
                        if self.unmasked_mode == "sample":
                            drafts.append(token)
                            rows.append(row)
                            ends_refused = True
                        break
                drafts.append(token)
                rows.append(row)
                pending.append(token)
                if matcher is not None:
                    if not matcher.accept_token(token):
                        raise RuntimeError(f"matcher refused draft {token} its own mask allowed")
                    advanced += 1
                elif token in seq.stop_token_ids and not sampling.ignore_eos:
                    break
        finally:
            if matcher is not None and advanced:
                matcher.rollback(advanced)
        if not drafts:
            return Proposal(token_ids=[], forwards=forwards)
        return Proposal(
            token_ids=drafts, draft_probs=torch.stack(rows), ends_refused=ends_refused, forwards=forwards
        )
