"""specgate's engines: models, KV caches, drafters and the grammar-masked speculative loop.

The engine knows nothing of HTTP or the OpenAI protocol; it takes token ids, a compiled
grammar and sampling parameters and produces tokens with statistics. It never imports
`gateway`. Public API (docs/contracts.md "engine"): the names below; heavy modules (torch,
transformers) load on first attribute access.
"""

from __future__ import annotations

from typing import Any

from engine.stats import EngineStatsSnapshot, RequestStats
from engine.types import (
    EngineConfig,
    EngineOverloadedError,
    GenerationError,
    GenerationRequest,
    PromptTooLongError,
    SamplingOptions,
    TokenDelta,
)

__all__ = [
    "EngineConfig",
    "EngineOverloadedError",
    "EngineStatsSnapshot",
    "GenerationError",
    "GenerationRequest",
    "PromptTooLongError",
    "RequestStats",
    "SamplingOptions",
    "SpecDecoder",
    "TokenDelta",
    "TorchEngine",
    "build_engine",
]


def __getattr__(name: str) -> Any:
    if name == "build_engine":
        from engine.build import build_engine

        return build_engine
    if name == "SpecDecoder":
        from engine.decoder import SpecDecoder

        return SpecDecoder
    if name == "TorchEngine":
        from engine.torch_engine import TorchEngine

        return TorchEngine
    raise AttributeError(name)
