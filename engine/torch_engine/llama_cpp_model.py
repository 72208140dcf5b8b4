"""A GGUF causal LM run by llama.cpp's CPU kernels (through llama-cpp-python's C API), behind
the per-sequence cache contract of `engine.torch_engine.kv_cache.KVCache`.

`LlamaCppModel(gguf_path, config=..., n_threads=..., n_ctx=...)` loads the weights once
(mmap); `model.new_cache()` returns a `LlamaCppCache`, one llama.cpp context (its own KV
cache of `n_ctx` positions, sequence 0) per sequence. The cache offers what the decoder,
the drafters and the cost model use: `extend(ids, num_logits=) -> [num_logits, V]` float32
logits of the last fed positions, `crop(length)` (exact rollback: `llama_memory_seq_rm`
drops positions >= length), `sync_to`, `pending_for_logits`, `reset`, `tokens`, `len()`.
`shareable` is False: the prefix cache (`engine.torch_engine.prefix_cache`) copies transformers' tensors
and is not offered llama.cpp positions.

Contexts are pooled on the model (creating one allocates its whole KV buffer), at most
`pool_size` kept per pool (`new_cache(pool=key)`: each decoder has its own, as each has its
own torch prefix cache), and a pooled context keeps what it cached: `new_cache(prefix=prompt)`
takes the pooled context sharing the longest common prefix with `prompt`, cropped to it, so a
request that repeats an earlier prompt's prefix (a system prompt, a schema, the same
question) starts with those positions cached — the prefix cache of these kernels (`len()` of
the new cache is what it got). The positions are the very keys/values computed for those
tokens at those positions, so reuse is exact.

Why these are the same weights as the torch path: the registered models are Q4_K_M GGUFs
which `engine.models` dequantizes to bf16 for torch; llama.cpp multiplies the quantized
blocks themselves (activations quantized to 8 bits inside its dot products), so logits differ
from the bf16 path by rounding, not by model. Greedy speculative output equals greedy plain
output on the same kernels (the decoder's invariant does not depend on the kernels).

Invariant: `tokens` is exactly what the context's sequence 0 holds. A failed
`llama_decode` leaves the context's contents unknown, so the cache resets itself and raises.
Knows nothing of drafts, grammars or requests. Import-safe without llama-cpp-python:
`llama_cpp` is imported when a model is loaded (`available()` says whether it can be).
"""

from __future__ import annotations

import ctypes
import importlib.util
import pathlib
import threading
import weakref
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import torch

from engine.torch_engine.kv_cache import PrefixSync, common_prefix_length

# x86 builds are made for x86-64-v3 (scripts/bootstrap.sh): loading them elsewhere would die
# on an illegal instruction, so the flags are checked before `llama_cpp` is imported.
REQUIRED_X86_FLAGS = ("avx2", "fma", "f16c")


def available() -> tuple[bool, str]:
    """(whether llama.cpp kernels can run in this process, why not)."""
    import platform

    from engine.pacing.hardware import cpu_info

    if importlib.util.find_spec("llama_cpp") is None:
        return False, "llama-cpp-python is not installed (scripts/bootstrap.sh builds it)"
    if platform.machine().lower() in ("x86_64", "amd64"):
        missing = [f for f in REQUIRED_X86_FLAGS if f not in cpu_info().flags]
        if missing:
            return False, f"this CPU lacks {' '.join(missing)}, which the llama.cpp build needs"
    return True, ""


_BACKEND_LOCK = threading.Lock()
_BACKEND_READY = False


def _llama() -> Any:
    global _BACKEND_READY
    import llama_cpp

    with _BACKEND_LOCK:
        if not _BACKEND_READY:
            llama_cpp.llama_log_set(_SILENT_LOG, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _BACKEND_READY = True
    return llama_cpp


def _silent(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    return None


try:  # the callback type exists only where llama-cpp-python is installed
    import llama_cpp as _llama_cpp_mod

    _SILENT_LOG: Any = _llama_cpp_mod.llama_log_callback(_silent)
except ImportError:  # pragma: no cover - exercised by builds without llama.cpp
    _SILENT_LOG = None


class LlamaCppModel:
    """GGUF weights loaded once; `new_cache()` per sequence. `config` / `generation_config`
    are the HF configs of the same model (vocab size, EOS ids), read by the engine."""

    kernels = "llama.cpp"

    def __init__(self, gguf_path: str | pathlib.Path, *, config: Any, generation_config: Any = None,
                 n_threads: int, n_ctx: int, n_batch: int = 512, pool_size: int = 4) -> None:
        llama = _llama()
        self.path = pathlib.Path(gguf_path)
        self.config = config
        self.generation_config = generation_config
        self.n_threads = n_threads
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.pool_size = pool_size
        params = llama.llama_model_default_params()
        params.n_gpu_layers = 0
        self._model = llama.llama_model_load_from_file(str(self.path).encode(), params)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load {self.path}")
        vocab = llama.llama_model_get_vocab(self._model)
        self.vocab_size = int(llama.llama_vocab_n_tokens(vocab))
        self._pools: dict[Hashable, list[tuple[Any, list[int]]]] = {}  # pool key -> (context, tokens), newest last
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _free_model, self._model, self._pools)

    @property
    def logits_width(self) -> int:
        return self.vocab_size

    def identity(self) -> str:
        """Cache identity for `engine.pacing.cost_model` (file name, size and the kernel build)."""
        import llama_cpp

        return f"{self.path.name}|{self.path.stat().st_size}|llama-cpp-python {llama_cpp.__version__}"

    def new_cache(self, *, prefix: Sequence[int] = (), pool: Hashable = None) -> LlamaCppCache:
        """A cache for a new sequence from `pool`; with `prefix`, it may start holding a common prefix."""
        return LlamaCppCache(self, prefix=prefix, pool=pool)

    def forget_prefixes(self) -> None:
        """Clear every pooled context (what `engine.torch_engine.prefix_cache.PrefixCache.clear` is to torch)."""
        llama = _llama()
        with self._lock:
            for pooled in self._pools.values():
                for index, (ctx, _) in enumerate(pooled):
                    llama.llama_memory_clear(llama.llama_get_memory(ctx), True)
                    pooled[index] = (ctx, [])

    def _acquire(self, prefix: Sequence[int], pool: Hashable) -> tuple[Any, list[int]]:
        """A context and the tokens it holds: the pooled one of `pool` with the longest common
        prefix with `prefix` (the newest on ties), cropped to it; a new one when the pool is empty."""
        with self._lock:
            pooled = self._pools.get(pool)
            if pooled:
                lengths = [common_prefix_length(tokens, prefix) for _, tokens in pooled]
                best = max(range(len(pooled)), key=lambda i: (lengths[i], i))
                ctx, tokens = pooled.pop(best)
                return ctx, tokens[: lengths[best]]
        llama = _llama()
        params = llama.llama_context_default_params()
        params.n_ctx = self.n_ctx
        params.n_batch = self.n_batch
        params.n_ubatch = self.n_batch
        params.n_seq_max = 1
        params.n_threads = self.n_threads
        params.n_threads_batch = self.n_threads
        params.no_perf = True
        ctx = llama.llama_init_from_model(self._model, params)
        if not ctx:
            raise RuntimeError(f"llama.cpp could not create a {self.n_ctx}-position context for {self.path.name}")
        return ctx, []

    def _release(self, ctx: Any, tokens: list[int], pool: Hashable) -> None:
        """Pool `ctx` (holding `tokens`), newest last; beyond `pool_size` free the oldest."""
        evicted = None
        with self._lock:
            if not self._finalizer.alive:
                evicted = ctx
            else:
                pooled = self._pools.setdefault(pool, [])
                pooled.append((ctx, tokens))
                if len(pooled) > self.pool_size:
                    evicted = pooled.pop(0)[0]
        if evicted is not None:
            _llama().llama_free(evicted)


def _free_model(model: Any, pools: dict[Hashable, list[tuple[Any, list[int]]]]) -> None:
    llama = _llama()
    for pooled in pools.values():
        while pooled:
            llama.llama_free(pooled.pop()[0])
    llama.llama_model_free(model)


class LlamaCppCache(PrefixSync):
    """One sequence's llama.cpp context; see the module docstring for the contract."""

    shareable = False

    def __init__(self, model: LlamaCppModel, *, prefix: Sequence[int] = (), pool: Hashable = None) -> None:
        self.model = model
        self._ctx, self.tokens = model._acquire(prefix, pool)
        self._batch = _llama().llama_batch_init(model.n_batch, 0, 1)
        if len(self.tokens) < self._held():
            self._crop_context(len(self.tokens))
        self._finalizer = weakref.finalize(self, _release, model, self._ctx, self._batch, self.tokens, pool)

    def _held(self) -> int:
        """Positions sequence 0 of the context holds (one past its last position)."""
        llama = _llama()
        return int(llama.llama_memory_seq_pos_max(llama.llama_get_memory(self._ctx), 0)) + 1

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, token_ids: Sequence[int], *, num_logits: int = 1) -> torch.Tensor:
        """Append `token_ids` and return float32 logits of the last `num_logits` fed
        positions: [num_logits, V] (as `KVCache.extend`)."""
        ids = [int(t) for t in token_ids]
        if not ids:
            raise ValueError("LlamaCppCache.extend needs at least one token")
        if min(ids) < 0 or max(ids) >= self.model.vocab_size:
            raise ValueError(f"token id outside [0, {self.model.vocab_size}) reached the model: {ids}")
        if not 1 <= num_logits <= min(len(ids), self.model.n_batch):
            raise ValueError(f"num_logits must be in [1, {min(len(ids), self.model.n_batch)}], got {num_logits}")
        if len(self.tokens) + len(ids) > self.model.n_ctx:
            raise ValueError(f"{len(self.tokens) + len(ids)} positions exceed the context of {self.model.n_ctx}")
        n_batch = self.model.n_batch
        tail_start = max(0, len(ids) - n_batch)  # the last chunk holds every position with logits
        starts = [*range(0, tail_start, n_batch), tail_start] if tail_start else [0]
        for chunk_index, start in enumerate(starts):
            end = starts[chunk_index + 1] if chunk_index + 1 < len(starts) else len(ids)
            last = end == len(ids)
            self._decode(ids[start:end], num_logits=num_logits if last else 0)
        llama = _llama()
        width = self.model.vocab_size
        n_fed = len(ids) - tail_start
        rows = [np.ctypeslib.as_array(llama.llama_get_logits_ith(self._ctx, i), shape=(width,))
                for i in range(n_fed - num_logits, n_fed)]
        return torch.from_numpy(np.stack(rows))  # [num_logits, V], a copy

    def _decode(self, ids: list[int], *, num_logits: int) -> None:
        llama = _llama()
        batch = self._batch
        base = len(self.tokens)
        n = len(ids)
        batch.n_tokens = n
        for i, token in enumerate(ids):
            batch.token[i] = token
            batch.pos[i] = base + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if i >= n - num_logits else 0
        rc = llama.llama_decode(self._ctx, batch)
        if rc != 0:
            self.reset()
            raise RuntimeError(f"llama_decode failed with code {rc} after {base} positions")
        self.tokens.extend(ids)

    def crop(self, length: int) -> None:
        """Keep the first `length` cached positions (exact rollback of the rest)."""
        if not 0 <= length <= len(self.tokens):
            raise ValueError(f"crop length {length} outside [0, {len(self.tokens)}]")
        if length == len(self.tokens):
            return
        self._crop_context(length)
        del self.tokens[length:]

    def _crop_context(self, length: int) -> None:
        llama = _llama()
        if not llama.llama_memory_seq_rm(llama.llama_get_memory(self._ctx), 0, length, -1):
            self.reset()
            raise RuntimeError(f"llama.cpp could not drop positions >= {length}")

    def reset(self) -> None:
        llama = _llama()
        llama.llama_memory_clear(llama.llama_get_memory(self._ctx), True)
        del self.tokens[:]


def _release(model: LlamaCppModel, ctx: Any, batch: Any, tokens: list[int], pool: Hashable) -> None:
    _llama().llama_batch_free(batch)
    model._release(ctx, tokens, pool)
