"""Per-request and engine-wide speculation statistics (pure data; the gateway logs/exports).

`RequestStats` counts one request's tokens (drafts as proposed → verified → accepted: the same
meaning on both engines) and splits its time into draft / target / mask /
sampler; it also says where the drafts came from (grammar-forced vs drafter) and how often an
unmasked draft model strayed off the grammar, and (torch engine) holds the request matcher's
per-row mask fill times (grammars.fill_times), the draft's rows apart from the target's, with
the grammar's family and backend. `region_drafts` / `region_accepted` split the verified and accepted drafts by the region of
the answer they fall in (`grammars.regions`: key, string, number, SQL identifier, ...; torch
engine). `EngineStats` aggregates finished and running
steps for a metrics line. `PrefixCacheStats` (per model `PoolStats`) is an engine-side
prefix cache's state (`Engine.prefix_cache_stats()`). None knows how the numbers were produced.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from grammars import FillTimes


@dataclass
class RequestStats:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0      # prompt positions the target restored from the prefix cache (not prefilled)
    draft_cached_tokens: int = 0  # the same for the draft model
    proposed_tokens: int = 0    # drafts the drafter produced (incl. grammar-refused ones cut before verification)
    draft_tokens: int = 0       # drafts sent to verification (verified)
    accepted_tokens: int = 0    # drafts the rejection sampler accepted
    steps: int = 0              # target forwards after prefill (one per step)
    spec_steps: int = 0         # steps that verified at least one draft
    forced_draft_tokens: int = 0     # drafts whose mask allowed only them (grammar-forced, free)
    forced_accepted_tokens: int = 0  # of those, accepted (all unless an earlier draft was rejected)
    region_drafts: dict[str, int] = field(default_factory=dict)    # verified drafts per output region
    region_accepted: dict[str, int] = field(default_factory=dict)  # of those, accepted (grammars.regions;
                                                                   # "forced": placed by the grammar,
                                                                   # "history": from earlier outputs)
    draft_forwards: int = 0          # draft-model forwards spent proposing
    draft_strays: int = 0            # proposals a model drafter cut or ended at a grammar-refused token
    unmasked_steps: int = 0          # steps whose draft could not be grammar-masked, so none was kept (vLLM plugin)
    closing_tokens: int = 0          # tokens of the closing written without sampling (close_within_max_tokens)
    closing_searches: int = 0        # closings searched (grammars.closing) near max_tokens
    time_draft_s: float = 0.0
    time_target_s: float = 0.0
    time_mask_s: float = 0.0
    time_sampler_s: float = 0.0
    time_total_s: float = 0.0
    grammar: str = ""                # CompiledGrammar.family ("" unconstrained)
    first_draft_step: int = 0        # the step (1 = the prefill step) that first verified drafts; 0: none did
    pacing_record: str = ""          # output-length record that paced the draft's prefill at the first
                                     # decode step: "exact" grammar, its "family", its "kind"; "": none (rental)
    grammar_backend: str = ""        # the backend that compiled it
    draft_mask_fills: FillTimes | None = None   # the drafter's rows (Matcher.fill_mask), live (torch engine)
    target_mask_fills: FillTimes | None = None  # the verify rows (Matcher.fill_masks), live (torch engine)

    @property
    def acceptance_rate(self) -> float:
        """Accepted / proposed drafts: a draft cut for being grammar-invalid counts as wasted."""
        proposed = max(self.proposed_tokens, self.draft_tokens)
        return self.accepted_tokens / proposed if proposed else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per target step (accepted drafts + the recovered/bonus token)."""
        return self.completion_tokens / self.steps if self.steps else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.completion_tokens / self.time_total_s if self.time_total_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ("draft_mask_fills", "target_mask_fills"):
            fills = getattr(self, name)
            out[name] = fills.as_dict() if fills is not None else None
        out["acceptance_rate"] = self.acceptance_rate
        out["mean_accepted_length"] = self.mean_accepted_length
        out["tokens_per_second"] = self.tokens_per_second
        return out


@dataclass(frozen=True)
class EngineStatsSnapshot:
    requests_finished: int
    steps: int
    emitted_tokens: int
    draft_tokens: int
    accepted_tokens: int

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.emitted_tokens / self.steps if self.steps else 0.0


class EngineStats:
    """Thread-safe running totals over every step the engine ran."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._finished = 0
        self._steps = 0
        self._emitted = 0
        self._drafted = 0
        self._accepted = 0

    def record_step(self, *, emitted: int, drafted: int, accepted: int) -> None:
        with self._lock:
            self._steps += 1
            self._emitted += emitted
            self._drafted += drafted
            self._accepted += accepted

    def record_finished(self) -> None:
        with self._lock:
            self._finished += 1

    def snapshot(self) -> EngineStatsSnapshot:
        with self._lock:
            return EngineStatsSnapshot(
                self._finished, self._steps, self._emitted, self._drafted, self._accepted
            )


@dataclass
class PoolStats:
    """One model's pool: lookups, lookups that restored something, positions restored
    (tokens not prefilled), positions stored, blocks evicted, blocks / bytes held now."""

    queries: int = 0
    hits: int = 0
    cached_tokens: int = 0
    stored_tokens: int = 0
    evicted_blocks: int = 0
    blocks: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class PrefixCacheStats:
    capacity_bytes: int
    block_tokens: int
    pools: dict[str, PoolStats] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.pools.values())
