"""Draft-model drafter: K autoregressive steps of a small model on its own KV cache.

Masked mode (default): at every draft step the matcher fills the mask for the current
state, the draft distribution is q = `ctx.transform.probs(draft_logits, mask)` (the very
transform the decoder applies to the target's logits), the draft is sampled from q with the request's
generator, and the matcher advances; at the end it rolls back by exactly the advances. A
grammar-forced position (`engine.drafters.base.ForcedWalk`: a one-token mask row, or a token
of the forced text the grammar's jump-forward string gives) needs no draft forward: its q is
one-hot (a deterministic proposal: exact), it is fed to the draft cache together with the
next forward's input, and it counts against `span`, not `k` (`k` bounds the draft forwards).

Unmasked mode (`masked=False`, what other engines do): drafts come from the raw logits,
`unmasked_mode="argmax"` (q one-hot, vLLM's default; a refused draft is truncated, which is
exact because a one-hot q on a refused token leaves residual = p) or "sample" (q = T without
mask; a refused draft ends the proposal and is kept for verification, which rejects it with
certainty and recovers from norm((p - q)+), keeping the law exact).

History drafts (`engine.drafters.history`, masked mode only): at a position of the drafter's
choice, the continuation earlier outputs of the same tenant and grammar wrote after the same
last tokens is proposed first, one token at a time while the mask allows it, with a
one-hot q and no draft forward; each takes one of the `k` slots (past them, the `span`
budget: a history run goes on where the draft model would stop), and the draft model resumes
(fed the history tokens with its next input) where history has nothing or the mask refuses.
Inside a forced text whose row allows other splits of it, a history token that splits it
differently is taken instead of the canonical one: history saw how this model writes it.

The draft cache lives on the sequence (`ctx.draft_kv`); it is synced to the committed
tokens as the draft reads them (`ctx.draft_tokens`: the prompt may be a window of it,
`engine.drafters.window`) at the start of every proposal (crop to the common prefix).
"""

from __future__ import annotations

from typing import Literal

import torch

from engine.drafters.base import DraftContext, ForcedWalk, Proposal
from engine.drafters.history import N_MAX
from sampler import sample_from_probs
from tokenmask import token_allowed


class ModelDrafter:
    name = "model"

    def __init__(self, *, masked: bool = True, unmasked_mode: Literal["argmax", "sample"] = "argmax") -> None:
        self.masked = masked
        self.unmasked_mode = unmasked_mode

    def propose(self, ctx: DraftContext, *, k: int, span: int = 0) -> Proposal:
        kv = ctx.draft_kv
        if kv is None:
            raise RuntimeError("ModelDrafter needs a sequence with a draft KV cache")
        if k <= 0 and span <= 0:
            return Proposal()
        pending = kv.pending_for_logits(ctx.draft_tokens)
        matcher = ctx.matcher
        transform = ctx.transform
        walk = ForcedWalk(ctx) if (self.masked and matcher is not None) else None
        history = ctx.history if self.masked else None
        guess: list[int] = []  # the rest of the history continuation being followed
        tail = ctx.tokens[-N_MAX:]  # all a history lookup reads of the committed tokens
        sources: list[str] = []  # per draft: "forced", "history" or "model"
        limit = ctx.bitmask.shape[0] - 1  # the verify masks bound the chain
        drafts: list[int] = []
        rows: list[torch.Tensor] = []  # each float32 [1, V]
        chosen = 0  # positions of the drafter's choice, the model's or history's (k bounds them)
        spanned = 0  # grammar-forced positions charged to `span`
        advanced = 0
        forwards = 0
        ends_refused = False
        dropped = 0
        mask_rows = 0
        try:
            while len(drafts) < limit:
                if matcher is not None and matcher.is_terminated():
                    break
                if chosen >= k and spanned >= span:
                    break  # the row after the last draft is the verify's to fill
                mask = ctx.bitmask[len(drafts):len(drafts) + 1]  # int32 [1, W]: this position's verify row
                if matcher is not None:
                    matcher.fill_mask(ctx.bitmask, row=len(drafts))
                    mask_rows += 1
                    if self.masked and not bool(mask[0].any()):
                        break  # a dead end: the verify meets it and ends the sequence there
                forced = walk.next(mask[0]) if walk is not None else None
                single = forced is not None and walk is not None and walk.single  # the row allows nothing else
                if history is not None and not guess and not single:
                    guess = history.continuation(tail + drafts, k=max(k - chosen, 0) + span - spanned)
                if forced is not None and not single and guess and guess[0] != forced and token_allowed(mask[0], guess[0]):
                    forced = None  # a forced text the row allows other splits of: history saw how this model writes it
                if forced is not None:
                    if spanned < span:
                        spanned += 1
                    elif chosen < k:
                        chosen += 1  # a forced token past the span budget takes a model slot
                    else:
                        break
                    token = forced
                    row = transform.one_hot([token])
                    guess = guess[1:] if guess[:1] == [token] else []
                    source = "forced"
                else:
                    if walk is not None:
                        walk.chosen()
                    if guess and (matcher is None or token_allowed(mask[0], guess[0])):
                        if chosen < k:
                            chosen += 1
                        else:
                            spanned += 1  # past K a history run goes on for free, like a forced span
                        token = guess.pop(0)
                        row = transform.one_hot([token])
                        source = "history"
                    else:
                        guess = []
                        if chosen >= k:
                            break
                        chosen += 1
                        source = "model"
                        logits = kv.extend(pending)  # [1, V]
                        forwards += 1
                        pending = []
                        if self.masked or self.unmasked_mode == "sample":
                            row = transform.probs(logits, mask if (self.masked and matcher is not None) else None)
                            token = int(sample_from_probs(row, generator=ctx.generator)[0])
                        else:
                            token = int(logits[0, : transform.vocab_limit].argmax())
                            row = transform.one_hot([token])
                        if matcher is not None and not self.masked and not token_allowed(mask[0], token):
                            if self.unmasked_mode == "sample":
                                drafts.append(token)
                                rows.append(row)
                                sources.append("model")
                                ends_refused = True
                            else:
                                dropped = 1
                            break
                drafts.append(token)
                rows.append(row)
                sources.append(source)
                pending.append(token)
                if matcher is not None:
                    if not matcher.accept_token(token):
                        raise RuntimeError(f"matcher refused draft {token} its own mask allowed")
                    advanced += 1
                elif ctx.stops_on(token):
                    break
        finally:
            if matcher is not None and advanced:
                matcher.rollback(advanced)
        if not drafts:
            return Proposal(forwards=forwards, dropped=dropped, mask_rows=mask_rows)
        return Proposal(
            token_ids=drafts, draft_probs=torch.cat(rows), ends_refused=ends_refused, forwards=forwards,
            dropped=dropped, mask_rows=mask_rows, forced=tuple(src == "forced" for src in sources),
            history=tuple(src == "history" for src in sources),
        )
