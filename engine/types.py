"""The engine's request/response value types: what the gateway hands in and gets back.

Contract (docs/contracts.md "engine"): `EngineConfig`, `SamplingOptions`, `GenerationRequest`,
`TokenDelta`, plus the errors the gateway maps to HTTP statuses (`PromptTooLongError` → 400,
`EngineOverloadedError` → 429/503, `GenerationError` → 500). Pure data: no torch, no models.
`RequestStats` lives in `engine.stats`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from engine.stats import RequestStats
    from grammars import CompiledGrammar

DrafterName = Literal["model", "ngram", "forced", "none"]
FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class EngineConfig:
    """How to build an engine. `drafter`: "model" (draft model, `draft_model` required),
    "ngram" (prompt lookup), "forced" (grammar-forced tokens only) or "none" (baseline).
    Every drafter except "none" also proposes grammar-forced tokens for free; a request's
    `prediction` text, when given, drives the drafts ahead of the configured drafter.

    `draft_mask=False` drafts from the raw draft logits (what other engines do), with
    `unmasked_mode` "argmax" (vLLM's default) or "sample"; verification stays exact.
    `max_spec_concurrency`: above this many active requests, steps run without speculation.
    `max_num_seqs`: active requests at once; more wait in a queue of at most `max_queue`.
    `adaptive_k`: the engine measures its forward costs at start (cached per machine, models,
    dtype and backend; `remeasure_costs` forces a new measurement) and picks K <= k per step.
    """

    model: str
    draft_model: str | None = None
    drafter: DrafterName = "model"
    k: int = 4
    adaptive_k: bool = True  # K per step from measured costs + acceptance (engine.cost_model); k is K_max
    draft_mask: bool = True
    unmasked_mode: Literal["argmax", "sample"] = "argmax"
    dtype: str = "auto"  # "auto": engine.hardware.choose_dtype (bf16 where the CPU has native bf16)
    device: str = "cpu"
    max_spec_concurrency: int = 8
    max_model_len: int = 4096
    grammar_backend: str = "xgrammar"
    max_num_seqs: int = 8
    max_queue: int = 64
    ngram_max: int = 3
    ngram_min: int = 1
    num_threads: int | None = None
    cache_dir: str | None = None
    remeasure_costs: bool = False

    def __post_init__(self) -> None:
        if self.k < 0:
            raise ValueError(f"EngineConfig.k must be >= 0, got {self.k}")
        if self.drafter not in ("model", "ngram", "forced", "none"):
            raise ValueError(f"EngineConfig.drafter must be model|ngram|forced|none, got {self.drafter!r}")
        if self.drafter == "model" and not self.draft_model:
            raise ValueError("EngineConfig.drafter='model' needs draft_model")
        if self.unmasked_mode not in ("argmax", "sample"):
            raise ValueError(f"EngineConfig.unmasked_mode must be argmax|sample, got {self.unmasked_mode!r}")
        if self.max_num_seqs < 1 or self.max_queue < 0:
            raise ValueError("EngineConfig.max_num_seqs must be >= 1 and max_queue >= 0")


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
    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingOptions = field(default_factory=SamplingOptions)
    grammar: CompiledGrammar | None = None
    prediction: str | None = None


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


class EngineOverloadedError(RuntimeError):
    """The request queue is full (`EngineConfig.max_queue`); retry later (HTTP 429/503)."""


class GenerationError(RuntimeError):
    """A request could not continue (e.g. the grammar allows no token: a dead end). The
    tokens already streamed are valid; no unconstrained token is ever emitted instead."""

    def __init__(self, message: str, *, request_id: str, cause: Any = None) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.cause = cause
