"""specgate's engines: models, KV caches, drafters and the grammar-masked speculative loop.

The engine knows nothing of HTTP or the OpenAI protocol; it takes token ids, a compiled
grammar and sampling parameters and produces tokens with statistics. It never imports
`gateway`. Public API (docs/contracts.md "engine"): the names below; heavy modules (torch,
transformers) load on first attribute access.
"""

from __future__ import annotations

from typing import Any

from engine.config import EngineConfig, VllmOptions
from engine.protocol import Engine
from engine.stats import EngineStatsSnapshot, RequestStats
from engine.types import (
    EngineDeadError,
    EngineOverloadedError,
    GenerationError,
    GenerationRequest,
    PromptTooLongError,
    SamplingOptions,
    TokenDelta,
    UnsupportedRequestError,
)

__all__ = [
    "Engine",
    "EngineConfig",
    "EngineUnavailableError",
    "EngineDeadError",
    "EngineOverloadedError",
    "EngineStatsSnapshot",
    "GenerationError",
    "GenerationRequest",
    "PromptTooLongError",
    "UnsupportedRequestError",
    "RequestStats",
    "SamplingOptions",
    "SpecDecoder",
    "TokenDelta",
    "TorchEngine",
    "VllmOptions",
    "build_engine",
]


def __getattr__(name: str) -> Any:
    if name in ("build_engine", "EngineUnavailableError"):
        from engine import build

        return getattr(build, name)
    if name == "SpecDecoder":
        from engine.torch_engine.decoder import SpecDecoder

        return SpecDecoder
    if name == "TorchEngine":
        from engine.torch_engine.engine import TorchEngine

        return TorchEngine
    raise AttributeError(name)
