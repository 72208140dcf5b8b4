"""One request's live decoding state: committed tokens, KV caches, matcher, generator,
scratch masks, statistics. Owned by exactly one decoder thread at a time; `free()` drops
every tensor and the matcher at once (cancel / finish).

Invariant: `tokens == prompt_token_ids + output_ids`; the KV caches hold a prefix of
`tokens` (plus, transiently during a step, draft tokens), synced by cropping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from engine.stats import RequestStats

if TYPE_CHECKING:
    from engine.adaptive import AdaptiveK
    from engine.drafters.base import Drafter
    from engine.kv_cache import KVCache
    from engine.types import GenerationRequest


@dataclass
class Sequence:
    request: GenerationRequest
    tokens: list[int]
    prompt_len: int
    target_kv: KVCache | None
    draft_kv: KVCache | None
    matcher: Any | None                 # grammars.Matcher
    generator: torch.Generator
    bitmask: torch.Tensor               # int32 [K_max+1, W]: verify masks
    draft_bitmask: torch.Tensor         # int32 [1, W]: drafting scratch
    logits_width: int                   # V of the logits
    vocab_limit: int                    # ids >= this are never sampled (tokenizer size)
    stop_token_ids: frozenset[int]
    drafter: Drafter
    stats: RequestStats = field(default_factory=RequestStats)
    adaptive: AdaptiveK | None = None
    finish_reason: str | None = None
    aborted: bool = False

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[self.prompt_len :]

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def live(self) -> bool:
        """Whether any cache or matcher is still held."""
        return self.target_kv is not None or self.draft_kv is not None or self.matcher is not None

    def free(self) -> None:
        self.target_kv = None
        self.draft_kv = None
        self.matcher = None
