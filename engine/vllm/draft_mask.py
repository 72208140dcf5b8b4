"""DraftMasker: per-request grammar matchers inside a vLLM worker, masking draft logits.

One DraftMasker lives on each model runner (worker process). Per speculative step:

    masker.begin(rows)                 # sync matchers with the tokens vLLM just accepted
    for each of the K draft steps:     # (inside the proposer)
        masker.mask_logits(logits)     # [B, V] fp32, in place: -inf where the grammar forbids
        ids = <vLLM's own draft sampler on the masked logits>
        masker.advance(ids)            # walk the matchers through the drafts
    masker.end()                       # roll every matcher back by its draft advances

Invariants:
- A row's mask at draft step i is the grammar state after the request's accepted output plus
  drafts 1..i-1: the same rows vLLM's scheduler fills for the target (StructuredOutputManager
  .grammar_bitmask), so q_i and p_i share masks and every masked draft is grammar-valid.
- After `end()` every matcher is back at "accepted output only"; `consumed` counts the output
  tokens it has accepted. When that disagrees with the request's history (preemption,
  resumption) the matcher is reset and replayed from the history.
- A terminated grammar stops masking and advancing (vLLM's scheduler cuts drafts after
  termination); a row whose mask allows nothing (dead end) is left unmasked for drafting
  (the target side reports the dead end); a token the matcher refuses marks the row dead.
- Token ids < 0 (vLLM's rejected/padding placeholder) are never fed to a matcher; with
  `debug=True` any such id, or one >= vocab_size, among the drafts raises AssertionError.

Knows nothing of vLLM classes: rows come in as `MaskRow`s and matchers from `compile_fn`
(xgrammar GrammarMatcher-like: accept_token, fill_next_token_bitmask, is_terminated,
rollback, reset). Pure bookkeeping plus one bitmask fill per active row per draft step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class MaskRow:
    """One input-batch row of a speculative step, as the worker sees it."""

    req_id: str
    history: Sequence[int]  # output tokens accepted before this step
    new_tokens: Sequence[int]  # tokens accepted this step (may contain -1 placeholders)
    grammar_key: Any = None  # None: no grammar; else whatever compile_fn takes
    masked: bool = True  # per-request draft-mask switch
    discard: bool = False  # partial prefill etc.: nothing to draft for


@dataclass
class _Req:
    matcher: Any
    consumed: int = 0
    draft_advances: int = 0
    active: bool = False  # masking/advancing in the current draft loop
    dead: bool = False


@dataclass
class DraftMaskStats:
    steps: int = 0  # propose calls with at least one masked row
    masked_rows: int = 0  # row-steps masked
    dead_rows: int = 0
    resyncs: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class DraftMasker:
    def __init__(
        self,
        *,
        compile_fn: Callable[[Any], Any],
        vocab_size: int,
        debug: bool = False,
    ) -> None:
        self.compile_fn = compile_fn
        self.vocab_size = int(vocab_size)
        self.debug = debug
        self.stats = DraftMaskStats()
        self._reqs: dict[str, _Req] = {}
        self._rows: list[_Req | None] = []
        self._bitmask: torch.Tensor | None = None  # [rows, ceil(V/32)] int32
        self.trace: list[tuple[str, int, list[int], int]] | None = None

    # ---- lifecycle of one speculative step --------------------------------------------------

    @property
    def live_request_ids(self) -> set[str]:
        return set(self._reqs)

    @property
    def any_active(self) -> bool:
        return any(r is not None and r.active for r in self._rows)

    def drop(self, req_ids: Iterable[str]) -> None:
        for rid in req_ids:
            self._reqs.pop(rid, None)

    def begin(self, rows: Sequence[MaskRow]) -> None:
        """Advance each row's matcher by its newly accepted tokens; choose the rows to mask."""
        self._rows = []
        seen: set[str] = set()
        for row in rows:
            seen.add(row.req_id)
            if row.grammar_key is None:
                self._reqs.pop(row.req_id, None)
                self._rows.append(None)
                continue
            req = self._reqs.get(row.req_id)
            if req is None:
                req = _Req(matcher=self.compile_fn(row.grammar_key))
                self._reqs[row.req_id] = req
            if row.discard:
                self._rows.append(None)
                continue
            self._sync(req, row)
            if self.debug and self.trace is not None:
                self.trace.append((row.req_id, len(row.history), list(row.new_tokens), req.consumed))
            req.draft_advances = 0
            req.active = row.masked and not req.dead and not req.matcher.is_terminated()
            self._rows.append(req)
        if any(r is not None and r.active for r in self._rows):
            self.stats.steps += 1

    def mask_logits(self, logits: torch.Tensor) -> None:  # logits [B, V] float32 (any device), in place
        """Set forbidden tokens to -inf on every active row (rows beyond `begin`'s are untouched)."""
        active = [i for i, r in enumerate(self._rows[: logits.shape[0]]) if r is not None and r.active]
        if not active:
            return
        import xgrammar as xgr

        words = (logits.shape[1] + 31) // 32
        if self._bitmask is None or self._bitmask.shape[0] < logits.shape[0] or self._bitmask.shape[1] != words:
            self._bitmask = torch.zeros(max(logits.shape[0], 8), words, dtype=torch.int32)
        bitmask = self._bitmask
        keep: list[int] = []
        for i in active:
            req = self._rows[i]
            assert req is not None
            req.matcher.fill_next_token_bitmask(bitmask, i)
            if not bool(bitmask[i].any()):  # dead end: leave the draft free, the target errors
                req.active = False
                req.dead = True
                self.stats.dead_rows += 1
                continue
            keep.append(i)
        if keep:
            rows = bitmask[: logits.shape[0]]
            if rows.device != logits.device:  # GPU: the fill is on the host, the kernel on device
                rows = rows.to(logits.device, non_blocking=True)
            xgr.apply_token_bitmask_inplace(logits, rows, indices=keep)
            self.stats.masked_rows += len(keep)

    def advance(self, token_ids: torch.Tensor) -> None:  # token_ids [B] int
        """Walk every active row's matcher through its sampled draft token."""
        if not self.any_active:
            return
        ids = token_ids.tolist()
        for i, req in enumerate(self._rows[: len(ids)]):
            if req is None or not req.active:
                continue
            tok = int(ids[i])
            if self.debug:
                assert 0 <= tok < self.vocab_size, f"draft token {tok} out of range (placeholder?)"
            if tok < 0 or not req.matcher.accept_token(tok):
                req.active = False  # cannot happen for a masked row; never advance past it
                continue
            req.draft_advances += 1
            if req.matcher.is_terminated():
                req.active = False  # grammar finished inside the draft window

    def end(self) -> None:
        """Roll every matcher back to its accepted-output state."""
        for req in self._rows:
            if req is not None and req.draft_advances:
                req.matcher.rollback(req.draft_advances)
                req.draft_advances = 0
            if req is not None:
                req.active = False
        self._rows = []

    # ---- internals -------------------------------------------------------------------------

    def _sync(self, req: _Req, row: MaskRow) -> None:
        new = [int(t) for t in row.new_tokens if int(t) >= 0]
        if req.consumed != len(row.history):
            req.matcher.reset()
            req.consumed = 0
            req.dead = False
            self.stats.resyncs += 1
            self._feed(req, [int(t) for t in row.history])
        self._feed(req, new)

    def _feed(self, req: _Req, tokens: Sequence[int]) -> None:
        for tok in tokens:
            req.consumed += 1
            if req.dead or req.matcher.is_terminated():
                continue
            if not req.matcher.accept_token(tok):
                req.dead = True
