"""Load on loopback, nothing lost (`benchmarks.load` against a real server, tiny engine): 12
concurrent streaming clients, 36 requests mixing JSON-schema, tool and free-text, ~15% hanging
up mid-stream. Every request is completed, refused with an error, or dropped by its client;
none is lost or duplicated; the engine holds nothing afterwards and the RSS returns to its
baseline. Prints requests/s, p50/p99 latency and TTFT, and the RSS figures. The larger run
is `python -m benchmarks.load` against `specgate serve` (docs/benchmarks.md "Load")."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gateway_harness import API_KEY, RunningServer, make_settings, start_server

from benchmarks.load import run_load


@pytest.fixture(scope="module")
def load_server(tiny_engine_factory: Callable[..., Any]) -> Iterator[RunningServer]:
    from gateway.app import create_app

    engine = tiny_engine_factory(max_num_seqs=4, max_queue=64)
    app = create_app(make_settings(max_concurrent_requests=4, max_queue=64), engine=engine)
    yield from start_server(app, engine)


def test_load_nothing_lost(load_server: RunningServer) -> None:
    warm = asyncio.run(run_load(load_server.base_url, api_key=API_KEY, clients=4, requests=6, drop=0.0,
                                max_tokens=8, seed=1))
    assert warm.completed == 6, warm.summary()
    report = asyncio.run(run_load(load_server.base_url, api_key=API_KEY, clients=12, requests=36, drop=0.15,
                                  max_tokens=24, seed=0, timeout_s=240, server_pid=os.getpid()))
    print("\nload (tiny engine, in-process server): " + report.summary())
    assert report.lost == 0 and report.duplicated == 0, report.summary()
    assert report.completed + report.dropped + sum(report.errors.values()) == report.requests
    assert set(report.errors) <= {"429 rate_limit_exceeded"}, report.errors
    assert report.completed >= report.requests // 2
    deadline = time.monotonic() + 20
    while load_server.engine.live_request_ids() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert load_server.engine.live_request_ids() == set()
    assert report.rss_mb["after"] - report.rss_mb["baseline"] < 64, report.rss_mb
