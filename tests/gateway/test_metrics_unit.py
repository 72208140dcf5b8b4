"""The periodic speculation log line and the per-app Prometheus registry (pure, no server)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.metrics import GatewayMetrics, SpecStatsLogger, spec_summary


def test_spec_summary_reports_the_interval_only() -> None:
    metrics = GatewayMetrics()
    metrics.record_generation(prompt_tokens=5, completion_tokens=10, draft_tokens=8, accepted_tokens=6, steps=4)
    before = metrics.totals()
    assert spec_summary(before, metrics.totals(), k=4) is None  # nothing ran in between
    metrics.record_generation(prompt_tokens=5, completion_tokens=12, draft_tokens=16, accepted_tokens=8, steps=4)
    line = spec_summary(before, metrics.totals(), k=4)
    assert line is not None
    assert "draft acceptance rate 0.500 (8/16)" in line
    assert "accepted tokens per step 3.00 (12 tokens / 4 steps)" in line
    assert "efficiency 0.500 accepted/proposed" in line


def test_registries_are_per_app() -> None:
    a, b = GatewayMetrics(), GatewayMetrics()
    a.record_generation(prompt_tokens=1, completion_tokens=3, draft_tokens=4, accepted_tokens=2, steps=1)
    assert b"specgate_spec_draft_tokens_total 4.0" in a.render()
    assert b"specgate_spec_draft_tokens_total 0.0" in b.render()


async def test_stats_logger_logs_periodically(caplog: pytest.LogCaptureFixture) -> None:
    metrics = GatewayMetrics()
    stats_logger = SpecStatsLogger(metrics, interval_s=0.05, k=4)
    with caplog.at_level(logging.INFO, logger="specgate.gateway.stats"):
        stats_logger.start()
        metrics.record_generation(prompt_tokens=1, completion_tokens=5, draft_tokens=4, accepted_tokens=4, steps=1)
        await asyncio.sleep(0.2)
        await stats_logger.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "specgate.gateway.stats"]
    assert len(lines) == 1 and "draft acceptance rate 1.000 (4/4)" in lines[0]


def test_engine_forward_costs_are_exported() -> None:
    from types import SimpleNamespace

    from engine.pacing.cost_model import ForwardCosts

    metrics = GatewayMetrics()
    metrics.record_engine(SimpleNamespace(forward_costs=None))  # an engine without costs: nothing, no error
    assert b"specgate_forward_seconds{" not in metrics.render()
    costs = ForwardCosts(target_s=(0.2, 0.365, 0.52), draft_s=0.08, cpu="AMD EPYC 7B13", flags=("avx2", "fma"))
    metrics.record_engine(SimpleNamespace(forward_costs=costs))
    text = metrics.render().decode()
    assert 'specgate_forward_seconds{model="target",tokens="3"} 0.52' in text
    assert 'specgate_forward_seconds{model="draft",tokens="1"} 0.08' in text
    assert 'cpu="AMD EPYC 7B13"' in text and 'flags="avx2 fma"' in text and 'speculation="off"' in text


def test_prefix_cache_stats_are_exported_at_scrape() -> None:
    from types import SimpleNamespace

    from engine.stats import PoolStats, PrefixCacheStats

    metrics = GatewayMetrics()
    metrics.watch_engine(SimpleNamespace(live_request_ids=set, dead_reason=None, prefix_cache_stats=lambda: None))
    assert b"specgate_prefix_cache" not in metrics.render()  # prefix cache off: nothing exported
    pools = {"target": PoolStats(queries=3, hits=2, cached_tokens=96, bytes=4096),
             "draft": PoolStats(queries=1, evicted_blocks=5)}
    stats = PrefixCacheStats(capacity_bytes=1 << 20, block_tokens=16, pools=pools)
    metrics.watch_engine(SimpleNamespace(live_request_ids=set, dead_reason=None, prefix_cache_stats=lambda: stats))
    text = metrics.render().decode()
    assert 'specgate_prefix_cache_hits_total{model="target"} 2.0' in text
    assert 'specgate_prefix_cache_cached_tokens_total{model="target"} 96.0' in text
    assert 'specgate_prefix_cache_evicted_blocks_total{model="draft"} 5.0' in text
    assert 'specgate_prefix_cache_bytes{model="target"} 4096.0' in text
    assert "specgate_prefix_cache_capacity_bytes 1.048576e+06" in text
