"""`SequenceState`: one request's live decoding state, owned by exactly one decoder thread at
a time: committed tokens, KV caches, matcher, generator, the request's transform T, scratch
masks, statistics. `free()` drops every cache and the matcher at once (cancel / finish).

Invariant: `tokens == prompt_token_ids + output_ids`; the target's KV cache holds a prefix of
`tokens`, the draft's a prefix of `draft_tokens` (the same, or a window of the prompt then the
output: `engine.drafters.window`), each plus, transiently during a step, draft tokens, synced
by cropping. Drafters see it
through the narrower `engine.drafters.base.DraftContext`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from engine.stats import RequestStats

if TYPE_CHECKING:
    from engine.drafters.base import Drafter
    from engine.drafters.history import HistoryDrafts
    from engine.drafters.span import ForcedSpans
    from engine.pacing.adaptive import AdaptiveK
    from engine.torch_engine.kv_cache import ModelCache
    from engine.torch_engine.transform import RequestTransform
    from engine.types import FinishReason, GenerationRequest
    from grammars import Matcher
    from grammars.regions import RegionScanner


@dataclass
class SequenceState:
    request: GenerationRequest
    tokens: list[int]
    prompt_len: int
    transform: RequestTransform
    generator: torch.Generator
    drafter: Drafter
    stop_token_ids: frozenset[int]
    bitmask: torch.Tensor               # int32 [K_max+span_tokens+1, W]: verify masks (the drafter writes its rows here)
    target_kv: ModelCache | None
    draft_kv: ModelCache | None = None
    matcher: Matcher | None = None
    stats: RequestStats = field(default_factory=RequestStats)
    adaptive: AdaptiveK | None = None
    finish_reason: FinishReason | None = None
    unpublished: set[str] = field(default_factory=set)  # prefix-cache pools still to get this prompt
    spans: ForcedSpans | None = None    # forced texts' draft tokens (None: no grammar, or spans off)
    history: HistoryDrafts | None = None  # earlier outputs' continuations (None: history drafts off)
    regions: RegionScanner | None = None  # the output read so far, for per-region draft statistics
    draft_lookup_version: int = -1  # the draft pool's version at this sequence's last lookup
    draft_prompt: list[int] | None = None  # the prompt as the draft reads it (engine.drafters.window; None: all)

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[self.prompt_len :]

    @property
    def draft_prompt_ids(self) -> list[int]:
        """The prompt the draft model reads: a window of it (`draft_prompt`) or all of it."""
        return self.draft_prompt if self.draft_prompt is not None else self.tokens[: self.prompt_len]

    @property
    def draft_tokens(self) -> list[int]:
        """The committed tokens as the draft model reads them: its prompt, then the output."""
        if self.draft_prompt is None:
            return self.tokens
        return self.draft_prompt + self.tokens[self.prompt_len :]

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def live(self) -> bool:
        """Whether any cache or matcher is still held."""
        return self.target_kv is not None or self.draft_kv is not None or self.matcher is not None

    def stops_on(self, token: int) -> bool:
        """Without a grammar: does `token` end the output (a stop token, unless ignore_eos)?"""
        return token in self.stop_token_ids and not self.request.sampling.ignore_eos

    def free(self) -> None:
        self.target_kv = None
        self.draft_kv = None
        self.matcher = None
