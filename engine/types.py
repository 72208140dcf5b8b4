"""The engine's request/response value types: what the gateway hands in and gets back.

Contract (docs/contracts.md "engine"): `SamplingOptions`, `GenerationRequest`, `TokenDelta`,
plus the errors the gateway maps to HTTP statuses (`PromptTooLongError` → 400,
`EngineOverloadedError` → 429, `EngineDeadError` → 503, `GenerationError` → 500). Pure data: no torch, no models.
`RequestStats` lives in `engine.stats`, `EngineConfig` in `engine.config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from engine.stats import RequestStats
    from grammars import CompiledGrammar

# "dead_end": the grammar allowed no token; the output so far (grammar-valid up to there) is
# all there is. Never an unconstrained token instead.
FinishReason = Literal["stop", "length", "dead_end"]


@dataclass(frozen=True)
class SamplingOptions:
    """Per-request sampling parameters; the same transform is applied to draft and target."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    # a grammar's answer is closed within max_tokens (grammars.closing: near the end the engine
    # writes a short valid ending instead of sampling; this changes the output law there)
    close_within_max_tokens: bool = False

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")


@dataclass
class GenerationRequest:
    """One generation. Per-request options live here, never as extra `generate` arguments:
    `prediction` (OpenAI Predicted Outputs text: drives the drafts) and `draft_mask` (None =
    the engine's default; True/False masks or leaves the draft unmasked for this request,
    an A/B switch that never changes the output law). `tenant`: whose history drafts this
    request may read and add to (`engine.drafters.history`; the gateway derives it from the
    caller's credentials and `user`, never from text the engine reads)."""

    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingOptions = field(default_factory=SamplingOptions)
    grammar: CompiledGrammar | None = None
    prediction: str | None = None
    draft_mask: bool | None = None
    tenant: str = ""


@dataclass
class TokenDelta:
    """One increment of output. `text` never splits a UTF-8 character and never contains
    (any part of) a matched stop string; the last delta has `finish_reason` and `stats`."""

    token_ids: list[int]
    text: str
    finish_reason: FinishReason | None = None
    stats: RequestStats | None = None


class PromptTooLongError(ValueError):
    """The prompt (plus at least one output token) does not fit `max_model_len`."""

    def __init__(self, prompt_tokens: int, max_model_len: int) -> None:
        super().__init__(
            f"prompt has {prompt_tokens} tokens; the model's max_model_len is {max_model_len} "
            "(prompt plus at least one generated token must fit)"
        )
        self.prompt_tokens = prompt_tokens
        self.max_model_len = max_model_len


class UnsupportedRequestError(ValueError):
    """A request option this engine does not serve (HTTP 400 naming the field `param`)."""

    def __init__(self, message: str, *, param: str) -> None:
        super().__init__(message)
        self.param = param


class EngineOverloadedError(RuntimeError):
    """The request queue is full (`EngineConfig.max_queue`); retry later (HTTP 429/503)."""


class EngineDeadError(RuntimeError):
    """The engine can serve no more requests (its worker died, vLLM's engine core exited, or
    it was shut down); every request in flight and every new one fails with this, at once
    (HTTP 503)."""


class GenerationError(RuntimeError):
    """A request could not continue (e.g. the grammar allows no token: a dead end). The
    tokens already streamed are valid; no unconstrained token is ever emitted instead."""

    def __init__(self, message: str, *, request_id: str, cause: Any = None) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.cause = cause
