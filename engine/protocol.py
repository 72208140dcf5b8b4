"""`Engine`: what every engine backend provides to the gateway (and to benchmarks and the CLI).

Both `engine.torch_engine.engine.TorchEngine` and `engine.vllm.engine.VllmEngine` satisfy it; mypy
checks them against it (`engine.build` returns `Engine`), and so does a test at run time.

Contract:
- `model_name`, `tokenizer`, `grammar_compiler` (compiles `GrammarSpec`s into grammars this
  engine can enforce), `max_model_len` (prompt + output tokens) are fixed after building.
- Facts for the gateway to show, fixed after building: `kernels` (what runs the models:
  "torch", "llama-cpp" or "vllm"), `dtype` (their weights: a torch dtype name, or "gguf"),
  `startup_notes` (lines to log at start: why these kernels and dtype, the measured costs),
  `forward_costs` (`engine.pacing.cost_model.ForwardCosts`, None where the engine measured
  none) and `prefix_cache_stats()` (None without an engine-side prefix cache).
- `start()` before the first request, `shutdown()` once at the end (frees workers, processes).
- `generate(request)` streams `TokenDelta`s; the last one carries `finish_reason` and
  `RequestStats`. Errors: `PromptTooLongError` / `ValueError` (bad prompt) before anything
  runs, `EngineOverloadedError` when the queue is full, `GenerationError` for a request that
  cannot continue. Closing the iterator early or cancelling its task aborts the request.
- `abort(request_id)` frees what the request holds (idempotent; unknown ids are ignored).
- Load signals for the gateway: `num_active`, `queue_depth`, `overloaded`,
  `live_request_ids()` (requests holding engine state), `stats_snapshot()`.
- Health: `dead_reason` is None while the engine can serve; once it cannot (its worker died,
  vLLM's engine core exited, or it was shut down) it says why, every request in flight fails
  and every new `generate` raises `EngineDeadError` at once (never a hang).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from engine.config import EngineConfig
    from engine.pacing.cost_model import ForwardCosts
    from engine.stats import EngineStatsSnapshot, PrefixCacheStats
    from engine.types import GenerationRequest, TokenDelta
    from grammars import GrammarCompiler


@runtime_checkable
class Engine(Protocol):
    config: EngineConfig
    model_name: str
    tokenizer: Any
    grammar_compiler: GrammarCompiler
    max_model_len: int
    kernels: str
    dtype: str
    startup_notes: list[str]
    forward_costs: ForwardCosts | None

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...

    def generate(self, request: GenerationRequest) -> AsyncGenerator[TokenDelta, None]: ...

    async def abort(self, request_id: str) -> None: ...

    @property
    def num_active(self) -> int: ...

    @property
    def queue_depth(self) -> int: ...

    @property
    def overloaded(self) -> bool: ...

    @property
    def dead_reason(self) -> str | None: ...

    def live_request_ids(self) -> set[str]: ...

    def stats_snapshot(self) -> EngineStatsSnapshot: ...

    def prefix_cache_stats(self) -> PrefixCacheStats | None: ...
