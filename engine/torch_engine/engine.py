"""The in-process torch engine: an async front over `SpecDecoder`, for the gateway.

Batching model: ONE engine worker thread owns the models and every live `Sequence`. It
admits up to `max_num_seqs` requests (more wait, FIFO, in a queue of at most `max_queue`;
beyond that `generate` raises `EngineOverloadedError`) and runs step-level round-robin: one
speculative step per active request per round, batch 1 per forward, each request with its
own KV caches, matcher and torch.Generator. Fairness: every active request advances one step
per round. Load switch (off by default): with more than `max_spec_concurrency` active
requests, steps run without speculation (K=0). One request per forward means a speculative
step takes no compute from the others, so speculation pays at any load here.

Why the output law of a request never depends on what runs beside it: a step reads and
writes only its own sequence's state (caches, matcher, generator) and the shared read-only
weights; speculation (any K, any drafter, masked or not, switched on or off between steps)
emits tokens with exactly the law of plain masked sampling from the target (the sampler's
invariant), so neither interleaving nor the load switch changes it. With a seed, greedy or
not, the same request gives the same output alone or under load as long as K is fixed
(the random stream consumed depends on K; the law does not).

Deltas travel to the caller's event loop with `call_soon_threadsafe`. Cancellation (abort,
the consumer closing the iterator, or its task being cancelled) marks the request; the
worker frees its caches and matcher before its next step (at once for a queued request).
Fault isolation: any exception while stepping one request (a grammar dead end, a drafter,
matcher or tokenizer error, out of memory) fails that request alone with `GenerationError`
after freeing its state; the worker goes on with the others. If the worker itself dies
(anything escaping the loop), the engine turns dead: `dead_reason` says why, every request
in flight and every new one fails with `EngineDeadError` at once. `shutdown()` does the same
with "engine shut down" for whatever is still in flight.
The engine knows nothing of HTTP; the gateway maps `PromptTooLongError` → 400,
`EngineOverloadedError` → 429, `EngineDeadError` → 503, `GenerationError` → 500.

Prefix cache: the decoder's (`engine.torch_engine.prefix_cache`, shared by every request of this engine,
thread-safe); a request starts from the longest cached prefix of its prompt, including one
published by a request still running beside it (copies: no tensor is shared).
`prefix_cache_stats()` is read by the gateway's /metrics.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.stats import EngineStats, EngineStatsSnapshot, PrefixCacheStats
from engine.torch_engine.decoder import SpecDecoder
from engine.torch_engine.detokenizer import Detokenizer
from engine.torch_engine.sequence_state import SequenceState
from engine.types import (
    EngineDeadError,
    EngineOverloadedError,
    GenerationError,
    GenerationRequest,
    TokenDelta,
)

if TYPE_CHECKING:
    from grammars import GrammarCompiler

_DONE = object()


@dataclass
class _Slot:
    request: GenerationRequest
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Any]
    seq: SequenceState | None = None
    detok: Detokenizer | None = None
    aborted: bool = False


class TorchEngine:
    def __init__(
        self,
        *,
        decoder: SpecDecoder,
        model_name: str,
        grammar_compiler: GrammarCompiler,
        kernels: str = "torch",
        dtype: str | None = None,
        startup_notes: Sequence[str] = (),
    ) -> None:
        self.decoder = decoder
        self.config = decoder.config
        self.model_name = model_name
        self.tokenizer = decoder.tokenizer
        self.max_model_len = decoder.max_model_len
        self.grammar_compiler = grammar_compiler
        self.forward_costs = decoder.costs  # shared by requests
        self.kernels = kernels  # or "llama-cpp" (engine.torch_engine.kernels)
        self.dtype = dtype if dtype is not None else str(decoder.config.dtype)
        self.startup_notes = list(startup_notes)
        self.stats = EngineStats()
        self._lock = threading.Condition()
        self._waiting: collections.deque[_Slot] = collections.deque()
        self._active: list[_Slot] = []
        self._slots: dict[str, _Slot] = {}
        self._thread: threading.Thread | None = None
        self._running = False
        self._dead: str | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self._thread is not None:
            return
        self._running = True
        self._thread = threading.Thread(target=self._worker, name="specgate-engine", daemon=True)
        self._thread.start()

    async def shutdown(self) -> None:
        with self._lock:
            self._running = False
            self._dead = self._dead or "engine shut down"
            self._lock.notify_all()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None
        self._fail_all(self._dead)

    @property
    def dead_reason(self) -> str | None:
        if self._dead is None and self._running and self._thread is not None and not self._thread.is_alive():
            return "engine worker thread exited"
        return self._dead

    def _fail_all(self, reason: str) -> None:
        with self._lock:
            slots = list(self._slots.values())
        for slot in slots:
            with contextlib.suppress(Exception):
                self._finish_slot(slot, error=EngineDeadError(reason))

    # ---- load signals ----------------------------------------------------------------------

    @property
    def num_active(self) -> int:
        return len(self._active)

    @property
    def queue_depth(self) -> int:
        return len(self._waiting)

    @property
    def overloaded(self) -> bool:
        return len(self._waiting) >= self.config.max_queue

    def stats_snapshot(self) -> EngineStatsSnapshot:
        return self.stats.snapshot()

    def prefix_cache_stats(self) -> PrefixCacheStats | None:
        """The prefix cache's counters and size (None when it is off)."""
        cache = self.decoder.prefix_cache
        return cache.stats() if cache is not None else None

    def live_request_ids(self) -> set[str]:
        """Requests holding engine state (queued or active)."""
        with self._lock:
            return set(self._slots)

    # ---- requests --------------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[TokenDelta, None]:
        self.decoder.check_prompt(request)  # PromptTooLongError / ValueError before queueing
        loop = asyncio.get_running_loop()
        slot = _Slot(request=request, loop=loop, queue=asyncio.Queue())
        with self._lock:
            dead = self.dead_reason
            if dead is not None:
                raise EngineDeadError(dead)
            if request.request_id in self._slots:
                raise ValueError(f"duplicate request_id {request.request_id!r}")
            if len(self._waiting) >= self.config.max_queue and len(self._active) >= self.config.max_num_seqs:
                raise EngineOverloadedError(
                    f"engine queue full ({len(self._waiting)} waiting, {len(self._active)} active)"
                )
            self._slots[request.request_id] = slot
            self._waiting.append(slot)
            self._lock.notify_all()
        finished = False
        try:
            while True:
                item = await slot.queue.get()
                if item is _DONE:
                    finished = True
                    return
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                yield item
        finally:
            if not finished:
                self._abort_slot(request.request_id)

    async def abort(self, request_id: str) -> None:
        self._abort_slot(request_id)

    def _abort_slot(self, request_id: str) -> None:
        with self._lock:
            slot = self._slots.get(request_id)
            if slot is None:
                return
            slot.aborted = True
            if slot in self._waiting:
                self._waiting.remove(slot)
                del self._slots[request_id]
            self._lock.notify_all()

    # ---- worker ----------------------------------------------------------------------------

    def _emit(self, slot: _Slot, item: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed
            slot.loop.call_soon_threadsafe(slot.queue.put_nowait, item)

    def _finish_slot(self, slot: _Slot, *, error: BaseException | None = None) -> None:
        seq, slot.seq = slot.seq, None
        if seq is not None:
            with contextlib.suppress(Exception):
                seq.free()
        with self._lock:
            self._slots.pop(slot.request.request_id, None)
            if slot in self._active:
                self._active.remove(slot)
            if slot in self._waiting:
                self._waiting.remove(slot)
        if not slot.aborted:
            self._emit(slot, error if error is not None else _DONE)

    def _worker(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - the worker is gone: fail everything, loudly
            with self._lock:
                self._dead = f"engine worker died: {type(exc).__name__}: {exc}"
            self._fail_all(self._dead)

    def _loop(self) -> None:
        if self.config.num_threads:
            import torch

            torch.set_num_threads(self.config.num_threads)
        while True:
            with self._lock:
                while self._running and not self._active and not self._waiting:
                    self._lock.wait()
                if not self._running:
                    return
                while self._waiting and len(self._active) < self.config.max_num_seqs:
                    self._active.append(self._waiting.popleft())
                round_slots = list(self._active)
            limit = self.config.max_spec_concurrency
            speculate = limit is None or len(round_slots) <= limit
            for slot in round_slots:
                if slot.aborted:
                    self._finish_slot(slot)
                    continue
                try:
                    self._step(slot, speculate=speculate)
                except Exception as exc:  # noqa: BLE001 - a request's failure must not kill the worker
                    error = exc if isinstance(exc, GenerationError) else GenerationError(
                        f"generation failed: {exc}", request_id=slot.request.request_id, cause=exc
                    )
                    self._finish_slot(slot, error=error)

    def _step(self, slot: _Slot, *, speculate: bool) -> None:
        if slot.seq is None:
            slot.seq = self.decoder.new_sequence(slot.request)
            slot.detok = Detokenizer(self.tokenizer, stop=slot.request.sampling.stop)
        seq, detok = slot.seq, slot.detok
        assert detok is not None
        drafted, accepted = seq.stats.draft_tokens, seq.stats.accepted_tokens
        committed = self.decoder.step(seq, k=self.decoder.choose_k(seq, speculate=speculate),
                                          span=None if speculate else 0)
        self.stats.record_step(
            emitted=len(committed),
            drafted=seq.stats.draft_tokens - drafted,
            accepted=seq.stats.accepted_tokens - accepted,
        )
        text, stopped = detok.push(committed)
        if stopped and not seq.finished:
            seq.finish_reason = "stop"
            self.decoder.record_finished(seq)
        if seq.finished:
            text += detok.flush()
            self._emit(slot, TokenDelta(token_ids=committed, text=text, finish_reason=seq.finish_reason or "stop",
                                        stats=seq.stats))
            self.stats.record_finished()
            self._finish_slot(slot)
        elif committed or text:
            self._emit(slot, TokenDelta(token_ids=committed, text=text))
