"""Prometheus metrics (one `CollectorRegistry` per app) and the periodic speculation log line.

Counters are fed by the routers from each finished request's `RequestStats` and by the
grammar step (compile time, cache hit/miss). `specgate_grammar_mask_fill_seconds{grammar,
backend, rows}` is a histogram of every mask row filled (`rows`: "draft", the drafter's, or
"target", the verify rows) for the finished requests whose engine timed them (the torch
engine; grammars.fill_times, bounds at 500 µs and 1 ms): a grammar's mask cost on the CPU
actually serving, not a benchmark's. The drafter writes the verify rows at its positions, so
the "target" rows are only those after the last draft. `specgate_gc_pause_seconds{generation}` times the
garbage collector's pauses (gateway.gc_heap). The torch engine's prefix cache
(`engine.prefix_cache_stats()`) is read at every scrape (`specgate_prefix_cache_*`, per model). `SpecStatsLogger` logs, every N seconds, the
figures operators watch over the last interval: draft acceptance rate, accepted tokens per
step, and efficiency (accepted ÷ proposed, per proposed position). This module knows nothing
about HTTP or how the figures are produced.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gateway.gc_heap import GcPauses
from gateway.histograms import histogram_family
from grammars import FILL_BUCKETS_S, FillTimes

if TYPE_CHECKING:
    from engine import Engine

logger = logging.getLogger("specgate.gateway.stats")

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)
_COMPILE_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)


@dataclass
class _Totals:
    draft_tokens: int = 0
    accepted_tokens: int = 0
    steps: int = 0
    spec_steps: int = 0
    completion_tokens: int = 0


class GatewayMetrics:
    """All metrics of one gateway app, registered in its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "specgate_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=r
        )
        self.in_flight = Gauge("specgate_requests_in_flight", "Generations running", registry=r)
        self.aborted = Counter(
            "specgate_generations_aborted", "Generations cancelled (client disconnect or error)", registry=r
        )
        self.prompt_tokens = Counter("specgate_prompt_tokens", "Prompt tokens processed", registry=r)
        self.completion_tokens = Counter(
            "specgate_completion_tokens", "Completion tokens generated", registry=r
        )
        self.latency = Histogram(
            "specgate_request_latency_seconds", "End-to-end generation latency", ["endpoint"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.ttft = Histogram(
            "specgate_time_to_first_token_seconds", "Time to first generated token", ["endpoint"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.draft_tokens = Counter(
            "specgate_spec_draft_tokens", "Draft tokens proposed for verification", registry=r
        )
        self.accepted_tokens = Counter(
            "specgate_spec_accepted_tokens", "Draft tokens accepted by the rejection sampler", registry=r
        )
        self.spec_steps = Counter("specgate_spec_steps", "Target verification steps", registry=r)
        self.region_draft_tokens = Counter(
            "specgate_spec_region_draft_tokens", "Draft tokens verified, per output region (grammars.regions; "
            "forced: placed by the grammar)", ["region"], registry=r)
        self.region_accepted_tokens = Counter(
            "specgate_spec_region_accepted_tokens", "Draft tokens accepted, per output region", ["region"], registry=r)
        self.dead_ends = Counter(
            "specgate_grammar_dead_ends", "Generations ended by a grammar dead end (answered with the "
            "text so far, choice error grammar_dead_end)", registry=r)
        self.acceptance_rate = Gauge(
            "specgate_spec_acceptance_rate", "Accepted / drafted tokens since start", registry=r
        )
        self.accepted_length = Gauge(
            "specgate_spec_mean_accepted_length", "Emitted tokens per target step since start", registry=r
        )
        self.grammar_compile = Histogram(
            "specgate_grammar_compile_seconds", "Grammar compile time", buckets=_COMPILE_BUCKETS, registry=r
        )
        self.grammar_cache = Counter(
            "specgate_grammar_cache", "Grammar compile cache lookups", ["result"], registry=r
        )
        self.engine_live = Gauge(
            "specgate_engine_live_requests", "Requests holding engine state (queued, running, or not yet freed)",
            registry=r,
        )
        self.engine_up = Gauge("specgate_engine_up", "1 while the engine can serve, 0 once it is dead", registry=r)
        self.forward_seconds = Gauge(
            "specgate_forward_seconds", "Measured forward time at engine start (engine.pacing.cost_model)",
            ["model", "tokens"], registry=r,
        )
        self.cost_model_info = Gauge(
            "specgate_cost_model_info", "Where the forward costs were measured (value 1)",
            ["cpu", "flags", "backend", "device", "dtype", "kernels", "speculation"], registry=r,
        )
        self.cached_prompt_tokens = Counter(
            "specgate_prompt_cached_tokens", "Prompt tokens served from the prefix cache (usage cached_tokens)",
            registry=r,
        )
        self._prefix_cache = _PrefixCacheCollector()
        r.register(self._prefix_cache)
        self._mask_fills = _MaskFillCollector()
        r.register(self._mask_fills)
        self.gc_pauses = GcPauses()  # the app's lifespan installs its gc hook
        r.register(self.gc_pauses)
        self._totals = _Totals()

    def watch_engine(self, engine: Engine) -> None:
        """Read the engine's live request count, health and prefix cache at every scrape."""
        self.engine_live.set_function(lambda: float(len(engine.live_request_ids())))
        self.engine_up.set_function(lambda: 0.0 if engine.dead_reason is not None else 1.0)
        self._prefix_cache.engine = engine

    def record_engine(self, engine: Engine) -> None:
        """Export the engine's measured forward costs (`engine.forward_costs`), if it has any."""
        costs = engine.forward_costs
        if costs is None:
            return
        for n, seconds in enumerate(costs.target_s, start=1):
            self.forward_seconds.labels(model="target", tokens=str(n)).set(seconds)
        if costs.draft_s is not None:
            self.forward_seconds.labels(model="draft", tokens="1").set(costs.draft_s)
        self.cost_model_info.labels(
            cpu=costs.cpu, flags=" ".join(costs.flags), backend=costs.backend, device=costs.device,
            dtype=costs.dtype, kernels=costs.kernel_path, speculation="pays" if costs.pays_at_all else "off",
        ).set(1)

    def record_generation(
        self, *, prompt_tokens: int, completion_tokens: int, draft_tokens: int, accepted_tokens: int, steps: int
    ) -> None:
        self.prompt_tokens.inc(prompt_tokens)
        self.completion_tokens.inc(completion_tokens)
        self.draft_tokens.inc(draft_tokens)
        self.accepted_tokens.inc(accepted_tokens)
        self.spec_steps.inc(steps)
        t = self._totals
        t.draft_tokens += draft_tokens
        t.accepted_tokens += accepted_tokens
        t.steps += steps
        t.completion_tokens += completion_tokens
        self.acceptance_rate.set(t.accepted_tokens / t.draft_tokens if t.draft_tokens else 0.0)
        self.accepted_length.set(t.completion_tokens / t.steps if t.steps else 0.0)

    def record_regions(self, *, drafts: dict[str, int], accepted: dict[str, int]) -> None:
        """Add one finished request's drafts and accepted drafts per output region."""
        for region, n in drafts.items():
            self.region_draft_tokens.labels(region=region).inc(n)
            self.region_accepted_tokens.labels(region=region).inc(accepted.get(region, 0))

    def record_mask_fills(self, *, grammar: str, backend: str, rows: str, fills: FillTimes) -> None:
        """Add one finished request's mask fill times (`rows`: "draft" or "target") to its
        grammar family's histogram."""
        if fills.count:
            self._mask_fills.add((grammar, backend, rows), fills)

    def totals(self) -> _Totals:
        t = self._totals
        return _Totals(t.draft_tokens, t.accepted_tokens, t.steps, t.spec_steps, t.completion_tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _PrefixCacheCollector:
    """`specgate_prefix_cache_*` from the watched engine's `prefix_cache_stats()` (None or
    absent: the engine has no prefix cache, nothing is exported)."""

    def __init__(self) -> None:
        self.engine: Engine | None = None

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        stats = self.engine.prefix_cache_stats() if self.engine is not None else None
        if stats is None:
            return
        counters = {
            "queries": "Prefix cache lookups (one per model per sequence start, more for a draft still empty)",
            "hits": "Prefix cache lookups that restored at least one block",
            "cached_tokens": "Prompt positions restored from the prefix cache (not prefilled)",
            "stored_tokens": "Prompt positions stored in the prefix cache",
            "evicted_blocks": "Prefix cache blocks evicted (LRU, to stay within the bound)",
        }
        for name, help_text in counters.items():
            family = CounterMetricFamily(f"specgate_prefix_cache_{name}", help_text, labels=["model"])
            for pool, pool_stats in stats.pools.items():
                family.add_metric([pool], float(getattr(pool_stats, name)))
            yield family
        held = GaugeMetricFamily("specgate_prefix_cache_bytes", "Bytes of keys/values held", labels=["model"])
        for pool, pool_stats in stats.pools.items():
            held.add_metric([pool], float(pool_stats.bytes))
        yield held
        yield GaugeMetricFamily("specgate_prefix_cache_capacity_bytes", "The prefix cache's bound",
                                value=float(stats.capacity_bytes))


class _MaskFillCollector:
    """`specgate_grammar_mask_fill_seconds{grammar, backend, rows}`: the merged fill times of
    the finished requests (a histogram with FILL_BUCKETS_S as its `le` bounds)."""

    def __init__(self) -> None:
        self._by_label: dict[tuple[str, str, str], FillTimes] = {}
        self._lock = threading.Lock()

    def add(self, label: tuple[str, str, str], fills: FillTimes) -> None:
        with self._lock:
            self._by_label.setdefault(label, FillTimes()).merge(fills)

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        with self._lock:
            rows = sorted((label, list(fills.counts), fills.sum_s) for label, fills in self._by_label.items())
        yield histogram_family(
            "specgate_grammar_mask_fill_seconds",
            "Grammar mask fill time per row, by grammar family, backend and rows (draft / target)",
            ["grammar", "backend", "rows"], FILL_BUCKETS_S, rows)


def spec_summary(before: _Totals, after: _Totals, *, k: int) -> str | None:
    """The periodic line for the interval between two totals, or None if nothing ran."""
    drafted = after.draft_tokens - before.draft_tokens
    accepted = after.accepted_tokens - before.accepted_tokens
    steps = after.steps - before.steps
    emitted = after.completion_tokens - before.completion_tokens
    if steps <= 0:
        return None
    acceptance = accepted / drafted if drafted else 0.0
    per_step = emitted / steps
    efficiency = per_step / (k + 1) if k > 0 else 1.0
    return (
        f"speculation: draft acceptance rate {acceptance:.3f} ({accepted}/{drafted}), "
        f"accepted tokens per step {per_step:.2f} ({emitted} tokens / {steps} steps), "
        f"efficiency {acceptance:.3f} accepted/proposed, {efficiency:.3f} of k+1={k + 1} per step"
    )


class SpecStatsLogger:
    """Background task logging `spec_summary` every `interval_s` seconds (when anything ran)."""

    def __init__(self, metrics: GatewayMetrics, *, interval_s: float, k: int) -> None:
        self._metrics = metrics
        self._interval_s = interval_s
        self._k = k
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._interval_s > 0:
            self._task = asyncio.create_task(self._run(self._metrics.totals()), name="specgate-stats-logger")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self, before: _Totals) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            after = self._metrics.totals()
            line = spec_summary(before, after, k=self._k)
            if line is not None:
                logger.info(line)
            before = after
