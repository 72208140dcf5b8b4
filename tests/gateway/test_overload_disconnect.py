"""Seams under load, against a real server + real engine limited to ONE running request and
no queue: a second request is a 429 with Retry-After; a client that disconnects mid-stream
(or abandons a non-streamed request) cancels its generation (engine.abort) and frees the slot."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from gateway_harness import API_KEY, RunningServer, make_settings, start_server

LONG = {"messages": [{"role": "user", "content": "Count forever."}], "max_tokens": 900, "ignore_eos": True,
        "temperature": 1.0}
HEADERS = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def small_server(tiny_engine_factory: Callable[..., Any]) -> Iterator[RunningServer]:
    from gateway.app import create_app

    engine = tiny_engine_factory(max_num_seqs=1, max_queue=0, drafter="none")
    app = create_app(make_settings(max_concurrent_requests=1, max_queue=0), engine=engine)
    yield from start_server(app, engine)


def _metric(base: str, name: str) -> float:
    for line in httpx.get(base + "/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    return 0.0


def _wait_until(pred: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_overload_then_disconnect_cancels_and_frees(small_server: RunningServer, openapi: Any) -> None:
    base = small_server.base_url
    model = httpx.get(base + "/v1/models", headers=HEADERS).json()["data"][0]["id"]
    body = {"model": model, **LONG, "stream": True}
    aborted_before = len(small_server.engine.aborted)
    with httpx.Client(base_url=base, headers=HEADERS, timeout=60) as c:
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            got = [next(lines) for _ in range(6)]
            assert any('"content"' in line for line in got)
            busy = httpx.post(base + "/v1/chat/completions", headers=HEADERS,
                              json={"model": model, "messages": LONG["messages"], "max_tokens": 3})
            assert busy.status_code == 429, busy.text
            assert int(busy.headers["Retry-After"]) >= 1
            openapi.validate(busy.json(), "ErrorResponse")
            assert busy.json()["error"]["code"] == "rate_limit_exceeded"
            # leave the stream early: the context manager closes the connection
    assert _wait_until(lambda: len(small_server.engine.aborted) > aborted_before), "no engine.abort after disconnect"
    assert _wait_until(lambda: _metric(base, "specgate_requests_in_flight") == 0)
    assert _metric(base, "specgate_generations_aborted_total") >= 1
    completed = _metric(base, "specgate_completion_tokens_total")
    assert completed < 900  # the abandoned stream never ran to max_tokens
    ok = httpx.post(base + "/v1/chat/completions", headers=HEADERS, timeout=60,
                    json={"model": model, "messages": LONG["messages"], "max_tokens": 3})
    assert ok.status_code == 200, ok.text  # the slot is free again


def test_abandoned_non_streamed_request_is_cancelled(small_server: RunningServer) -> None:
    base = small_server.base_url
    model = httpx.get(base + "/v1/models", headers=HEADERS).json()["data"][0]["id"]
    aborted_before = len(small_server.engine.aborted)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(base + "/v1/chat/completions", headers=HEADERS, timeout=1.0, json={"model": model, **LONG})
    assert _wait_until(lambda: len(small_server.engine.aborted) > aborted_before), "no engine.abort after disconnect"
    assert _wait_until(lambda: _metric(base, "specgate_requests_in_flight") == 0)
