"""DraftMasker: per-request grammar matchers inside a vLLM worker, masking draft logits.

One DraftMasker lives on each model runner (worker process). Per speculative step:

    masker.begin(rows)                 # sync matchers with the tokens vLLM just accepted
    for each of the K draft steps:     # (inside the proposer)
        masker.mask_logits(logits)     # [B, V] fp32, in place: -inf where the grammar forbids
        ids = <vLLM's own draft sampler on the masked logits>
        masker.advance(ids)            # stage the drafts; the matchers walk them lazily
    masker.end()                       # roll every matcher back by its draft advances

Invariants:
- A row's mask at draft step i is the grammar state after the request's accepted output plus
  drafts 1..i-1: the same rows vLLM's scheduler fills for the target (StructuredOutputManager
  .grammar_bitmask), so q_i and p_i share masks and every masked draft is grammar-valid.
- After `end()` every matcher is back at "accepted output only"; `consumed` counts the output
  tokens it has accepted. When that disagrees with the request's history (preemption,
  resumption) the matcher is reset and replayed from the history.
- A terminated grammar stops masking and advancing (vLLM's scheduler cuts drafts after
  termination).
- Exactness: a grammar row never keeps a draft that was not sampled from its masked q. A row
  whose mask allows nothing (dead end), or whose matcher refused a token (the row's
  matcher disagrees with the scheduler's), or that the caller marks unmaskable
  (`begin(..., unmaskable=...)`: no masker, a grammar backend the masker cannot mirror)
  gets a draft limit: the number of masked drafts it holds when that happens (0 at the
  start of a step). `end()` returns the limits by request id; the plugin cuts the row's
  drafts to that length before they reach the scheduler, so the request drafts nothing
  it could not mask (no speculation for that step: plain masked sampling, exact at any
  temperature) instead of drafting from the raw logits. A row whose grammar terminates
  keeps its drafts up to the stop token (the ones after it were not masked). Counted: `stats.dead_rows`,
  `stats.refused_rows`, `stats.unmaskable_rows`, `stats.limited_rows` (row-steps cut),
  `stats.cut_drafts` (draft tokens removed) and per request (`take_request_counts`).
- Token ids < 0 (vLLM's rejected/padding placeholder) are never fed to a matcher; with
  `debug=True` any such id, or one >= vocab_size, among the drafts raises AssertionError
  (in `advance` itself: debug gives up the overlap below).
- Only rows with a grammar AND the draft mask on keep a matcher: every other row costs one
  `MaskRow` and nothing else.
- Reasoning (a row whose `reasoning` is set, with `gate_fn`): the request's `Gate` (the
  scheduler's reasoning-end rule, `engine.vllm.reasoning_gate`) decides where the grammar
  starts. While the request reasons its draft rows are not masked (the target's are not
  either) and its matcher is fed nothing; the committed tokens from the gate's grammar
  start on, and the drafts from `draft_bounds`' grammar start on, are fed to the matcher.
  In a draft chain that crosses the end, row i (the row that samples draft i) is masked
  iff i >= the constraint start of drafts 0..i-1: the rows before and at the end token are
  the raw draft distribution, the rows after it the grammar's, exactly where the
  scheduler's target rows are. Counted: `stats.reasoning_rows` (row-steps drawn unmasked
  while reasoning), `stats.reasoning_ends` (chains whose drafts ended the reasoning).
  Without `gate_fn` or `reasoning` a grammar row is masked from its first output token.

Cost (the hot path, `times` records each phase): one batch bitmask fill per draft step for
all active rows (xgrammar's `BatchGrammarMatcher`, a single matcher's own fill at batch 1), one
vectorised dead-end check, one `apply_token_bitmask_inplace`, one batch accept and one batch
rollback per step; the bitmask buffer is allocated once and grows only with the batch.

Pipelining (GPU readiness): `begin(rows, sampled=...)` and `advance` only stage the token
ids (on an accelerator, a non-blocking copy into a reused pinned host buffer plus an event);
the matchers sync / accept them at the next `any_active` / `mask_logits` / `end`, i.e. after
vLLM has launched the draft model's next forward (the proposer calls the sampler only after
each forward), so the host's accept + bitmask fill for draft i+1 overlaps that forward
instead of stalling the device between draft steps. On CPU the staged tensor is the ids
themselves and the order of operations is the same, so the CPU tests cover the logic.

Knows nothing of vLLM classes: rows come in as `MaskRow`s and matchers from `compile_fn`
(xgrammar GrammarMatcher: accept_token, fill_next_token_bitmask, is_terminated, rollback,
reset).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from engine.vllm.timing import PluginTimes


@dataclass(frozen=True)
class MaskRow:
    """One input-batch row of a speculative step, as the worker sees it."""

    req_id: str
    history: Sequence[int]  # output tokens accepted before this step
    new_tokens: Sequence[int]  # tokens accepted this step (may contain -1 placeholders)
    grammar_key: Any = None  # None: no grammar; else whatever compile_fn takes
    masked: bool = True  # per-request draft-mask switch
    discard: bool = False  # partial prefill etc.: nothing to draft for
    unmaskable: bool = False  # grammar + mask on, but no matcher can mirror it: draft nothing
    reasoning: Any = None  # None: grammar from the first output token; else what gate_fn takes


class Gate(Protocol):
    """Where a reasoning request's grammar starts (`engine.vllm.reasoning_gate.ReasoningGate`)."""

    ended: bool  # the grammar runs on the committed tokens

    def reset(self) -> None: ...

    def commit(self, tokens: Sequence[int]) -> int | None: ...  # grammar start in tokens; None: reasoning

    def draft_bounds(self, drafts: Sequence[int]) -> tuple[int, int]: ...  # (grammar, constraint) start


@dataclass
class _Req:
    matcher: Any
    gate: Gate | None = None
    consumed: int = 0
    draft_advances: int = 0  # drafts the matcher accepted this step (rolled back at end)
    drawn: int = 0  # drafts drawn this step while masking or watching
    drafts: list[int] = field(default_factory=list)  # this step's drafts (gated rows only)
    active: bool = False  # masking/advancing in the current draft loop
    watching: bool = False  # reasoning: unmasked, watching the drafts for the end
    dead: bool = False


@dataclass
class DraftMaskStats:
    steps: int = 0  # propose calls with at least one masked row
    masked_rows: int = 0  # row-steps masked
    dead_rows: int = 0  # rows whose mask allowed nothing (grammar dead end)
    refused_rows: int = 0  # rows whose matcher refused an accepted or drafted token
    unmaskable_rows: int = 0  # row-steps the caller marked unmaskable (no masker / backend)
    limited_rows: int = 0  # row-steps whose drafts were cut to the masked prefix
    cut_drafts: int = 0  # draft tokens removed by those cuts (filled in by the caller)
    ended_drafts: int = 0  # draft tokens after a grammar's termination removed (not a fallback)
    resyncs: int = 0
    reasoning_rows: int = 0  # row-steps drawn unmasked because the request was reasoning
    reasoning_ends: int = 0  # draft chains whose drafts ended the reasoning (masked from the next row)
    extra: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        return {"steps": self.steps, "masked_rows": self.masked_rows, "dead_rows": self.dead_rows,
                "refused_rows": self.refused_rows, "unmaskable_rows": self.unmaskable_rows,
                "limited_rows": self.limited_rows, "cut_drafts": self.cut_drafts,
                "ended_drafts": self.ended_drafts, "resyncs": self.resyncs,
                "reasoning_rows": self.reasoning_rows, "reasoning_ends": self.reasoning_ends}


class DraftMasker:
    def __init__(
        self,
        *,
        compile_fn: Callable[[Any], Any],
        vocab_size: int,
        debug: bool = False,
        times: PluginTimes | None = None,
        gate_fn: Callable[[Any], Gate] | None = None,
    ) -> None:
        self.compile_fn = compile_fn
        self.gate_fn = gate_fn
        self.vocab_size = int(vocab_size)
        self.debug = debug
        self.stats = DraftMaskStats()
        self.times = times if times is not None else PluginTimes()
        self._reqs: dict[str, _Req] = {}
        self._rows: list[_Req | None] = []
        self._active: list[int] = []  # rows masking/advancing in this draft loop, ascending
        self._watch: list[int] = []  # reasoning rows drawing unmasked in this draft loop
        self._stepped = False  # this step counted in stats.steps
        self._bitmask: torch.Tensor | None = None  # [rows, ceil(V/32)] int32, host, reused
        self._device_bitmask: torch.Tensor | None = None  # its copy on the logits' device
        self._pending: tuple[torch.Tensor, Any] | None = None  # staged [B] draft ids, copy event
        self._pending_begin: tuple[list[MaskRow], tuple[torch.Tensor, Any] | None] | None = None
        self._host_ids: torch.Tensor | None = None  # pinned [rows] int64 staging buffer
        self._host_sampled: torch.Tensor | None = None  # pinned [rows, K+1] int64 staging buffer
        self._batch: Any = None  # xgrammar BatchGrammarMatcher, created on first batch fill
        self._limits: dict[int, int] = {}  # row -> drafts it may keep this step (masked prefix)
        self._ends: dict[int, int] = {}  # row -> drafts up to its grammar's termination
        self._row_ids: list[str] = []  # row -> request id, this step
        self._request_limited: OrderedDict[str, int] = OrderedDict()  # req -> steps cut (bounded)
        self.last_fallbacks: frozenset[str] = frozenset()  # end()'s limited requests (not terminations)
        self.trace: list[tuple[str, int, list[int], int]] | None = None

    # ---- lifecycle of one speculative step --------------------------------------------------

    @property
    def live_request_ids(self) -> set[str]:
        return set(self._reqs)

    @property
    def any_active(self) -> bool:
        """Rows to mask or to watch (reasoning) in this draft loop."""
        self._drain()
        return bool(self._active or self._watch)

    def consumed(self, req_id: str) -> int | None:
        """Output tokens the request's matcher has accepted (None: no matcher yet)."""
        req = self._reqs.get(req_id)
        return None if req is None else req.consumed

    def drop(self, req_ids: Iterable[str]) -> None:
        for rid in req_ids:
            self._reqs.pop(rid, None)

    def begin(self, rows: Sequence[MaskRow], *, sampled: torch.Tensor | None = None) -> None:
        """Start a speculative step: each row's matcher will advance by its newly accepted
        tokens, then the rows to mask are chosen. With `sampled` ([B, <= K+1] int, -1
        placeholders, any device) a grammar row's new tokens are row i of it instead of
        `row.new_tokens`. The sync itself runs at the first use (any_active / mask_logits /
        end): on an accelerator, after vLLM has launched the draft model's first forward."""
        self._rows = []
        self._active = []
        self._watch = []
        self._stepped = False
        self._limits = {}
        self._ends = {}
        self._row_ids = [r.req_id for r in rows]
        self._pending = None
        staged = None
        if sampled is not None and any(r.grammar_key is not None and r.masked for r in rows):
            staged = self._stage(sampled, "_host_sampled")
        self._pending_begin = (list(rows), staged)

    def _start(self) -> None:
        rows, staged = self._pending_begin or ((), None)
        self._pending_begin = None
        t0 = time.perf_counter()
        sampled = self._read(staged) if staged is not None else None
        compile_s = 0.0
        for i, row in enumerate(rows):
            if row.unmaskable and row.masked and not row.discard:
                self._reqs.pop(row.req_id, None)
                self._rows.append(None)
                self._limits[i] = 0
                self.stats.unmaskable_rows += 1
                continue
            if row.grammar_key is None or not row.masked:
                if self._reqs:
                    self._reqs.pop(row.req_id, None)
                self._rows.append(None)
                continue
            req = self._reqs.get(row.req_id)
            if req is None:
                c0 = time.perf_counter()
                gate = self.gate_fn(row.reasoning) if self.gate_fn is not None and row.reasoning is not None else None
                req = _Req(matcher=self.compile_fn(row.grammar_key), gate=gate)
                compile_s += time.perf_counter() - c0
                self._reqs[row.req_id] = req
            if row.discard:
                self._rows.append(None)
                continue
            new = row.new_tokens if sampled is None else (sampled[i] if i < len(sampled) else ())
            self._sync(req, row.history, new)
            if self.debug and self.trace is not None:
                self.trace.append((row.req_id, len(row.history), list(new), req.consumed))
            req.draft_advances = 0
            req.drawn = 0
            req.drafts = []
            req.watching = req.gate is not None and not req.gate.ended and not req.dead
            req.active = not req.watching and not req.dead and not req.matcher.is_terminated()
            if req.watching:
                self._watch.append(i)
            elif req.dead:  # refused earlier, or a dead end: nothing it drafts can be masked
                self._limits[i] = 0
            elif not req.active:  # terminated: every draft would come after the end
                self._ends[i] = 0
            if req.active:
                self._active.append(i)
            self._rows.append(req)
        if self._active:
            self._count_step()
        self.times.add("compile", compile_s)
        self.times.add("sync", time.perf_counter() - t0 - compile_s)

    def mask_logits(self, logits: torch.Tensor) -> None:  # logits [B, V] float32 (any device), in place
        """Set forbidden tokens to -inf on every active row (rows beyond `begin`'s are untouched)."""
        self._drain()
        n = logits.shape[0]
        if self._watch:
            self._open(n)
        active = [i for i in self._active if i < n]
        if not active:
            return
        import xgrammar as xgr

        t0 = time.perf_counter()
        bitmask = self._buffer(n, (logits.shape[1] + 31) // 32, pin=logits.device.type != "cpu")
        matchers = [self._req(i).matcher for i in active]
        if len(active) == 1:
            matchers[0].fill_next_token_bitmask(bitmask, active[0])
        else:
            if self._batch is None:
                self._batch = xgr.BatchGrammarMatcher()
            self._batch.batch_fill_next_token_bitmask(matchers, bitmask, active)
        t1 = time.perf_counter()
        index = torch.tensor(active, dtype=torch.long)
        alive = bitmask.index_select(0, index).ne(0).any(dim=1).tolist()  # [len(active)] bool
        keep = [i for i, ok in zip(active, alive, strict=True) if ok]
        for i, ok in zip(active, alive, strict=True):
            if not ok:  # dead end: keep only the drafts masked so far (the target errors)
                req = self._req(i)
                req.active = False
                req.dead = True
                self._limits.setdefault(i, req.drawn)
                self.stats.dead_rows += 1
        if len(keep) != len(active):
            self._active = [i for i in self._active if self._req(i).active]
        if keep:
            rows = bitmask[:n]
            if rows.device != logits.device:  # accelerator: fill on the host, apply on the device
                if self._device_bitmask is None or self._device_bitmask.shape != bitmask.shape \
                        or self._device_bitmask.device != logits.device:
                    self._device_bitmask = torch.empty_like(bitmask, device=logits.device)
                self._device_bitmask[:n].copy_(rows, non_blocking=True)
                rows = self._device_bitmask[:n]
            xgr.apply_token_bitmask_inplace(logits, rows, indices=keep)
            self.stats.masked_rows += len(keep)
        self.times.add("fill", t1 - t0)
        self.times.add("apply", time.perf_counter() - t1)

    def advance(self, token_ids: torch.Tensor) -> None:  # token_ids [B] int (any device)
        """Stage the sampled draft tokens; the active matchers accept them at the next use."""
        self._drain()
        if not self._active and not self._watch:
            return
        t0 = time.perf_counter()
        self._pending = self._stage(token_ids, "_host_ids")
        self.times.add("advance", time.perf_counter() - t0)
        if self.debug:  # debug: check the drafts now, not at the next use
            self._drain()

    def end(self) -> dict[str, int]:
        """Roll every matcher back to its accepted-output state. Returns the draft limits of
        this step by request id: how many leading drafts each row that could not be masked
        all the way may keep, and each row whose grammar terminated (drafts up to and
        including the stop token); rows absent keep all of them. Only the first kind counts
        as `limited_rows` and in `take_request_counts`."""
        self._drain()
        t0 = time.perf_counter()
        back = [r for r in self._rows if r is not None and r.draft_advances]
        if len(back) == 1:
            back[0].matcher.rollback(back[0].draft_advances)
        elif back:
            import xgrammar as xgr

            xgr.BatchGrammarMatcher.batch_rollback([r.matcher for r in back], [r.draft_advances for r in back])
        for req in self._rows:
            if req is not None:
                req.draft_advances = 0
                req.drawn = 0
                req.drafts = []
                req.active = False
                req.watching = False
        self._rows = []
        self._active = []
        self._watch = []
        limits = {self._row_ids[i]: n for i, n in self._limits.items() if i < len(self._row_ids)}
        self.last_fallbacks = frozenset(limits)
        for rid in limits:
            self._request_limited[rid] = self._request_limited.pop(rid, 0) + 1
        while len(self._request_limited) > 4096:
            self._request_limited.popitem(last=False)
        self.stats.limited_rows += len(limits)
        for i, n in self._ends.items():  # not a fallback: the grammar ended inside the window
            if i < len(self._row_ids) and i not in self._limits:
                limits[self._row_ids[i]] = n
        self._limits = {}
        self._ends = {}
        self.times.add("rollback", time.perf_counter() - t0)
        return limits

    def take_request_counts(self, req_ids: Iterable[str]) -> dict[str, int]:
        """Steps whose drafts were cut to their masked prefix, per request (read once: the
        entries are removed; the table keeps the last 4096 requests). An id also matches
        the engine's internal id `<id>-<8 characters>` (vLLM makes request ids unique so)."""
        out: dict[str, int] = {}
        for rid in req_ids:
            keys = [k for k in self._request_limited
                    if k == rid or (len(k) == len(rid) + 9 and k.startswith(rid + "-"))]
            for key in keys:
                out[rid] = out.get(rid, 0) + self._request_limited.pop(key)
        return out

    # ---- internals -------------------------------------------------------------------------

    def _req(self, i: int) -> _Req:
        req = self._rows[i]
        assert req is not None
        return req

    def _buffer(self, rows: int, words: int, *, pin: bool) -> torch.Tensor:
        """The reused host bitmask (pinned when it is copied to an accelerator, so that the
        copy is truly asynchronous)."""
        if self._bitmask is None or self._bitmask.shape[0] < rows or self._bitmask.shape[1] != words:
            self._bitmask = torch.zeros(max(rows, 8), words, dtype=torch.int32, pin_memory=pin)
        return self._bitmask

    def _stage(self, ids: torch.Tensor, buffer: str) -> tuple[torch.Tensor, Any]:
        """`ids` on the host: itself on CPU; else a non-blocking copy into a reused pinned
        buffer plus the event that says it landed (queued behind the ops that produce `ids`)."""
        if ids.device.type == "cpu":
            return ids, None
        host: torch.Tensor | None = getattr(self, buffer)
        if host is None or host.shape[0] < ids.shape[0] or host.shape[1:] != ids.shape[1:]:
            host = torch.empty((max(ids.shape[0], 8), *ids.shape[1:]), dtype=torch.int64, pin_memory=True)
            setattr(self, buffer, host)
        out = host[: ids.shape[0]]
        out.copy_(ids, non_blocking=True)
        event = torch.cuda.Event() if ids.device.type == "cuda" else None
        if event is not None:
            event.record()
        return out, event

    @staticmethod
    def _read(staged: tuple[torch.Tensor, Any]) -> list[Any]:
        ids, event = staged
        if event is not None:
            event.synchronize()
        return ids.tolist()

    def _drain(self) -> None:
        """Run a staged `begin`, then walk the active matchers through the staged draft ids."""
        if self._pending_begin is not None:
            self._start()
        pending, self._pending = self._pending, None
        if pending is None:
            return
        t0 = time.perf_counter()
        ids = self._read(pending)
        for i in [i for i in self._watch if i < len(ids)]:  # reasoning rows: record, feed nothing
            req = self._req(i)
            tok = int(ids[i])
            if tok < 0:  # no draft here: nothing after it is drawn either
                req.watching = False
                continue
            req.drafts.append(tok)
            req.drawn += 1
        self._watch = [i for i in self._watch if self._req(i).watching]
        active = [i for i in self._active if i < len(ids)]
        toks = [int(ids[i]) for i in active]
        if self.debug:
            for tok in toks:
                assert 0 <= tok < self.vocab_size, f"draft token {tok} out of range (placeholder?)"
        reqs = [self._req(i) for i in active]
        ok_rows = [(r, t) for r, t in zip(reqs, toks, strict=True) if t >= 0]
        if len(ok_rows) == 1:
            accepted = [ok_rows[0][0].matcher.accept_token(ok_rows[0][1])]
        elif ok_rows:
            import xgrammar as xgr

            accepted = xgr.BatchGrammarMatcher.batch_accept_token([r.matcher for r, _ in ok_rows],
                                                                   [t for _, t in ok_rows])
        else:
            accepted = []
        for req in reqs:
            req.active = False  # refused or placeholder: cannot happen for a masked row
        ok_by_req = {id(req): ok for (req, _), ok in zip(ok_rows, accepted, strict=True)}
        for i, req, tok in zip(active, reqs, toks, strict=True):
            if ok_by_req.get(id(req), False):
                req.draft_advances += 1
                req.drawn += 1
                if req.gate is not None:
                    req.drafts.append(tok)
                req.active = not req.matcher.is_terminated()  # finished inside the draft window
                if not req.active:  # drafts after the end are unmasked: cut them here
                    self._ends[i] = req.drawn
            else:  # the draft is not one the mask allowed: keep only the drafts before it
                self._limits.setdefault(i, req.drawn)
                self.stats.refused_rows += 1
        self._active = [i for i in self._active if self._req(i).active]
        self.times.add("advance", time.perf_counter() - t0)

    def _count_step(self) -> None:
        if not self._stepped:
            self._stepped = True
            self.stats.steps += 1
            self.times.masked_steps += 1

    def _open(self, n: int) -> None:
        """Draft step `len(drafts)` of each watched (reasoning) row below `n`: when its drafts
        so far end the reasoning, feed the matcher the drafts from the grammar start on and
        mask the row from now on; else the row stays unmasked for this draft."""
        still: list[int] = []
        opened = False
        for i in self._watch:
            req = self._req(i)
            if i >= n:
                still.append(i)
                continue
            grammar_start, constraint_start = req.gate.draft_bounds(req.drafts) if req.gate else (0, 0)
            if constraint_start > len(req.drafts):
                self.stats.reasoning_rows += 1
                still.append(i)
                continue
            req.watching = False
            self.stats.reasoning_ends += 1
            for k, tok in enumerate(req.drafts[grammar_start:]):
                if req.matcher.is_terminated() or not req.matcher.accept_token(tok):
                    self._limits.setdefault(i, grammar_start + k)  # keep the drafts before it
                    self.stats.refused_rows += 1
                    break
                req.draft_advances += 1
            else:
                if req.matcher.is_terminated():  # an implicit end that also ends the grammar
                    self._ends[i] = req.drawn
                else:
                    req.active = True
                    opened = True
        self._watch = still
        if opened:
            self._active = sorted(self._active + [i for i, r in enumerate(self._rows) if r is not None
                                                  and r.active and i not in self._active])
            self._count_step()

    def _sync(self, req: _Req, history: Sequence[int], new_tokens: Sequence[int]) -> None:
        new = [int(t) for t in new_tokens if t >= 0]
        if req.consumed != len(history):
            req.matcher.reset()
            if req.gate is not None:
                req.gate.reset()
            req.consumed = 0
            req.dead = False
            self.stats.resyncs += 1
            self._feed(req, [int(t) for t in history])
        self._feed(req, new)

    def _feed(self, req: _Req, tokens: Sequence[int]) -> None:
        if req.gate is not None and not req.gate.ended and tokens:
            start = req.gate.commit(tokens)  # the scheduler's accept_tokens: reasoning tokens skip the grammar
            skip = len(tokens) if start is None else start
            req.consumed += skip
            tokens = tokens[skip:]
        for tok in tokens:
            req.consumed += 1
            if req.dead or req.matcher.is_terminated():
                continue
            if not req.matcher.accept_token(tok):
                req.dead = True
                self.stats.refused_rows += 1
