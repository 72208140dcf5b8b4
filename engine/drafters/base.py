"""The drafter contract: propose up to K draft tokens for one sequence, leaving its matcher
in the state it found it.

A drafter sees a sequence only through `DraftContext` (committed tokens, matcher, the verify
masks, the request's transform T and generator, its draft KV cache and the tokens that cache
follows, `draft_tokens`, its stop rule).
A drafter with a matcher fills the mask at each position it drafts straight into the verify
masks: row i of `ctx.bitmask` is the mask after drafts[:i], and `Proposal.mask_rows` says
how many rows (from row 0) it wrote, so the verify fills only the rows after them.
`Proposal.draft_probs` is the q the rejection sampler must use: float32 [n, V] from a model
drafter (masked or raw, as drafted), or None for model-free drafts (q = one-hot).
Masked drafters never propose a token the grammar refuses and stop after a token that
terminates the grammar (or, without a grammar, after a stop token). An unmasked drafter may
end its proposal with ONE refused token (`ends_refused`), which verification rejects with
certainty (p = 0 there) and replaces by a recovered token from norm((p - q)+): keeping it,
rather than truncating, is what keeps the output law exact for sampled raw drafts.

Grammar-forced drafts (`ForcedWalk`): a position whose mask allows exactly one token, or the
next token of the forced text the matcher's jump-forward string gives (`engine.drafters.span`),
needs no drafter's choice; `Proposal.forced` flags them. `Proposal.history` flags the drafts
taken from earlier outputs (`engine.drafters.history`; one-hot q, no forward).
`propose(ctx, k=, span=)`: `k` bounds the drafter's own choices (a draft model's forwards), `span` the grammar-forced tokens
a chain may hold beyond them (a forced token past `span` takes one of the `k` slots); the
chain never outgrows the verify masks (`ctx.bitmask` rows - 1).

`walk_forced_and_lookup` is the shared loop of model-free drafters: at each position a
grammar-forced token is proposed for free, else the drafter's next guess if the grammar
allows it; the first refused guess ends the proposal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from tokenmask import forced_token, token_allowed

if TYPE_CHECKING:
    from engine.drafters.history import HistoryDrafts
    from engine.drafters.span import ForcedSpans
    from engine.torch_engine.kv_cache import ModelCache
    from engine.torch_engine.transform import RequestTransform
    from grammars import Matcher


class DraftContext(Protocol):
    """What a drafter may read (and, for the matcher / draft cache / generator, use) of a
    sequence; `engine.torch_engine.sequence_state.SequenceState` provides it."""

    tokens: list[int]
    matcher: Matcher | None
    bitmask: torch.Tensor           # int32 [K_max+1, W]: the verify masks (row i: after drafts[:i])
    draft_kv: ModelCache | None
    transform: RequestTransform
    generator: torch.Generator
    spans: ForcedSpans | None       # canonical tokens of forced texts (None: one-token rows only)
    history: HistoryDrafts | None   # earlier outputs' continuations (None: no history drafts)

    @property
    def output_ids(self) -> list[int]: ...

    @property
    def draft_tokens(self) -> list[int]: ...  # `tokens` as the draft model reads them (its prompt may be a window)

    def stops_on(self, token: int) -> bool: ...


@dataclass(frozen=True)
class Proposal:
    token_ids: list[int] = field(default_factory=list)
    draft_probs: torch.Tensor | None = None  # float32 [n, V]; None = one-hot at token_ids
    ends_refused: bool = False               # the last token is refused by the grammar
    forwards: int = 0                        # draft-model forwards spent
    dropped: int = 0                         # drafted tokens the grammar refused, cut before verification
    mask_rows: int = 0                       # rows 0.. of ctx.bitmask written: the masks after drafts[:i]
    forced: tuple[bool, ...] = ()            # per draft: placed by the grammar, not chosen by the drafter
    history: tuple[bool, ...] = ()           # per draft: an earlier output's continuation (q one-hot)


class Drafter(Protocol):
    name: str

    def propose(self, ctx: DraftContext, *, k: int, span: int = 0) -> Proposal: ...


class ForcedWalk:
    """The grammar-forced token at each position of one proposal, or None where the grammar
    leaves a choice: a one-token mask row, else the next token of the forced text
    (`ctx.matcher.jump_forward_text()`, tokenized by `ctx.spans`). The caller feeds every
    token it places to the matcher; `next` must see every position in order."""

    def __init__(self, ctx: DraftContext) -> None:
        self.matcher = ctx.matcher
        self.spans = ctx.spans
        self.queue: list[int] = []  # the rest of the current forced text's tokens
        self.single = False  # the last `next` token was the only one its row allows

    def next(self, row: torch.Tensor) -> int | None:  # row: int32 [W], this position's mask
        token = forced_token(row)
        self.single = token is not None
        if token is not None:
            self.queue = self.queue[1:] if self.queue[:1] == [token] else []
            return token
        if not self.queue and self.spans is not None and self.matcher is not None:
            self.queue = list(self.spans.tokens(self.matcher.jump_forward_text()))
        if self.queue and token_allowed(row, self.queue[0]):
            return self.queue.pop(0)
        self.queue = []
        return None

    def chosen(self) -> None:
        """The caller placed a token of its own choice: the forced text no longer applies."""
        self.queue = []


def walk_forced_and_lookup(
    ctx: DraftContext, *, k: int, guess: Callable[[list[int]], list[int]] | None
) -> Proposal:
    """One-hot drafts: grammar-forced tokens, else `guess(drafts_so_far)` continuations.

    `guess` returns the drafter's continuation after `ctx.tokens + drafts` (possibly empty);
    None means forced tokens only. Matcher state is restored before returning.
    """
    matcher = ctx.matcher
    walk = ForcedWalk(ctx) if matcher is not None else None
    drafts: list[int] = []
    forced_flags: list[bool] = []
    pending_guess: list[int] = []
    advanced = 0
    dropped = 0
    mask_rows = 0
    try:
        while len(drafts) < k:
            forced = None
            row = None
            if matcher is not None and walk is not None:
                if matcher.is_terminated():
                    break
                row = ctx.bitmask[len(drafts)]
                matcher.fill_mask(ctx.bitmask, row=len(drafts))
                mask_rows += 1
                forced = walk.next(row)
            if forced is not None:
                token = forced
                if pending_guess and pending_guess[0] == token:
                    pending_guess.pop(0)
                else:
                    pending_guess = []
            else:
                if guess is None:
                    break
                if not pending_guess:
                    pending_guess = list(guess(drafts))[: k - len(drafts)]
                if not pending_guess:
                    break
                token = pending_guess.pop(0)
                if row is not None and not token_allowed(row, token):
                    dropped = 1
                    break  # truncate at the first refused guess
                if walk is not None:
                    walk.chosen()
            drafts.append(token)
            forced_flags.append(forced is not None)
            if matcher is not None:
                if not matcher.accept_token(token):
                    drafts.pop()
                    forced_flags.pop()
                    break
                advanced += 1
            elif ctx.stops_on(token):
                break
    finally:
        if matcher is not None and advanced:
            matcher.rollback(advanced)
    return Proposal(token_ids=drafts, dropped=dropped, mask_rows=mask_rows, forced=tuple(forced_flags))
