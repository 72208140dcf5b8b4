"""Cancellation frees everything (torch engine, real server): after many clients drop their
streams mid-generation (and some abandon non-streamed requests), no request is left in the
engine (queued or active), no sequence state / KV cache / matcher survives, the in-flight
gauge is back at 0, every queue slot is usable again, and the process RSS returns to its
baseline. Prints the counts and the RSS figures."""

from __future__ import annotations

import concurrent.futures
import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from gateway_harness import API_KEY, RunningServer, make_settings, start_server

HEADERS = {"Authorization": f"Bearer {API_KEY}"}
SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}},
          "required": ["items"]}
DROPS = 48


@pytest.fixture(scope="module")
def drop_server(tiny_engine_factory: Callable[..., Any]) -> Iterator[RunningServer]:
    from gateway.app import create_app

    engine = tiny_engine_factory(max_num_seqs=4, max_queue=8)
    app = create_app(make_settings(max_concurrent_requests=4, max_queue=8), engine=engine)
    yield from start_server(app, engine)


def _live_objects() -> dict[str, int]:
    from engine.torch_engine.kv_cache import KVCache
    from engine.torch_engine.sequence_state import SequenceState
    from grammars import Matcher

    gc.collect()
    counts = {"SequenceState": 0, "KVCache": 0, "Matcher": 0}
    for obj in gc.get_objects():
        if isinstance(obj, SequenceState):
            counts["SequenceState"] += 1
        elif isinstance(obj, KVCache):
            counts["KVCache"] += 1
        elif isinstance(obj, Matcher):
            counts["Matcher"] += 1
    return counts


def _rss_mb() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss) / 2**20


def _metric(base: str, name: str) -> float:
    for line in httpx.get(base + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def _drop_stream(base: str, body: dict[str, Any], chunks: int) -> int:
    with httpx.stream("POST", base + "/v1/chat/completions", headers=HEADERS, json={**body, "stream": True},
                      timeout=60) as r:
        if r.status_code != 200:
            return r.status_code
        for i, _ in enumerate(r.iter_lines()):
            if i >= chunks:
                break
    return 200  # leaving the block closes the connection mid-stream


def _abandon(base: str, body: dict[str, Any]) -> int:
    try:
        httpx.post(base + "/v1/chat/completions", headers=HEADERS, json=body, timeout=0.3)
    except httpx.TimeoutException:
        return 0
    return 200


def _round(base: str, model: str, n: int) -> list[int]:
    bodies = [
        {"model": model, "messages": [{"role": "user", "content": f"list things {i}"}], "max_tokens": 400,
         "ignore_eos": True, **({"response_format": {"type": "json_schema", "json_schema": {
             "name": "x", "schema": SCHEMA}}} if i % 2 else {})}
        for i in range(n)
    ]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        futs = [pool.submit(_drop_stream, base, b, 2 + i % 5) if i % 4 else pool.submit(_abandon, base, b)
                for i, b in enumerate(bodies)]
        return [f.result() for f in futs]


def _settled(server: RunningServer, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.engine.live_request_ids() and _metric(server.base_url, "specgate_requests_in_flight") == 0:
            return True
        time.sleep(0.1)
    return False


def test_dropped_streams_free_everything(drop_server: RunningServer) -> None:
    base = drop_server.base_url
    model = httpx.get(base + "/v1/models", headers=HEADERS).json()["data"][0]["id"]
    _round(base, model, 8)  # warm-up: compiled grammars cached, allocator pools filled
    assert _settled(drop_server)
    baseline_rss = _rss_mb()
    baseline_objs = _live_objects()
    statuses: list[int] = []
    peak = baseline_rss
    for _ in range(DROPS // 8):
        statuses += _round(base, model, 8)
        peak = max(peak, _rss_mb())
    assert _settled(drop_server), f"still live: {drop_server.engine.live_request_ids()}"
    inner = drop_server.engine._inner
    assert not inner._active and not inner._waiting and not inner._slots
    after_objs = _live_objects()
    after_rss = _rss_mb()
    assert after_objs == baseline_objs, (baseline_objs, after_objs)
    assert all(s in (0, 200, 429) for s in statuses), statuses
    aborted = _metric(base, "specgate_generations_aborted_total")
    # every queue slot is usable: max_num_seqs + max_queue requests at once all succeed
    with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
        oks = list(pool.map(lambda i: httpx.post(base + "/v1/chat/completions", headers=HEADERS, timeout=60, json={
            "model": model, "messages": [{"role": "user", "content": f"hi {i}"}], "max_tokens": 4}).status_code,
            range(12)))
    assert oks == [200] * 12, oks
    growth = after_rss - baseline_rss
    print(f"\ncancellation: {len(statuses)} requests dropped mid-generation ({statuses.count(200)} streams cut, "
          f"{statuses.count(0)} non-streamed abandoned, {statuses.count(429)} refused 429); aborted metric "
          f"{aborted:.0f}; live after: engine {len(drop_server.engine.live_request_ids())}, objects {after_objs} "
          f"(baseline {baseline_objs}); RSS baseline {baseline_rss:.0f} MB, peak {peak:.0f} MB, after "
          f"{after_rss:.0f} MB ({growth:+.0f} MB); then 12/12 slots served")
    assert growth < 64, f"RSS grew {growth:.0f} MB after {len(statuses)} dropped requests"
