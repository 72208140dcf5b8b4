"""Auth and exposure on the real server: the API key guards every /v1 route (and /metrics
when `metrics_access=api_key`); `/health` can be turned off (404); CORS answers only for the
configured origins and is absent by default; prompt and completion text never reach the logs
(at DEBUG, through a success, a stream and an error)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from gateway_harness import API_KEY, RunningServer, make_settings, start_server

AUTH = {"Authorization": f"Bearer {API_KEY}"}
ORIGIN = "https://app.example"


@pytest.fixture(scope="module")
def locked(tiny_engine_factory: Callable[..., Any]) -> Iterator[RunningServer]:
    from gateway.app import create_app

    engine = tiny_engine_factory()
    app = create_app(make_settings(metrics_access="api_key", health_access="off", cors_allow_origins=ORIGIN),
                     engine=engine)
    yield from start_server(app, engine)


def test_every_v1_route_needs_the_key(locked: RunningServer, openapi: Any) -> None:
    base = locked.base_url
    routes = [("GET", "/v1/models", None), ("GET", "/v1/models/x", None),
              ("POST", "/v1/chat/completions", {"model": "x", "messages": [{"role": "user", "content": "hi"}]}),
              ("POST", "/v1/completions", {"model": "x", "prompt": "hi"})]
    tried = 0
    for method, path, body in routes:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {API_KEY}"},
                        {"Authorization": f"Bearer {API_KEY}x"}, {"Authorization": "Bearer"}):
            r = httpx.request(method, base + path, json=body, headers=headers)
            assert r.status_code == 401, (path, headers, r.text)
            openapi.validate(r.json(), "ErrorResponse")
            assert r.headers["WWW-Authenticate"] == "Bearer"
            tried += 1
        ok = httpx.request(method, base + path, json=body, headers=AUTH)
        assert ok.status_code != 401
    print(f"\nauth: {tried} unauthenticated /v1 calls, all 401 in the envelope")


def test_metrics_behind_key_and_health_off(locked: RunningServer, openapi: Any) -> None:
    base = locked.base_url
    assert httpx.get(base + "/metrics").status_code == 401
    assert httpx.get(base + "/metrics", headers=AUTH).status_code == 200
    r = httpx.get(base + "/health", headers=AUTH)
    assert r.status_code == 404
    openapi.validate(r.json(), "ErrorResponse")


def test_cors_only_for_configured_origins(locked: RunningServer, server: RunningServer) -> None:
    pre = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization,content-type"}
    r = httpx.options(locked.v1 + "/chat/completions", headers=pre)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    evil = httpx.options(locked.v1 + "/chat/completions", headers={**pre, "Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in evil.headers
    default = httpx.options(server.v1 + "/chat/completions", headers=pre)  # CORS not configured
    assert "access-control-allow-origin" not in default.headers
    got = httpx.get(server.v1 + "/models", headers={**AUTH, "Origin": ORIGIN})
    assert "access-control-allow-origin" not in got.headers


def test_prompt_and_completion_text_are_never_logged(server: RunningServer, caplog: Any) -> None:
    secret = "zebra-violet-4417"
    model = httpx.get(server.v1 + "/models", headers=AUTH).json()["data"][0]["id"]
    caplog.set_level(logging.DEBUG)
    outputs = []
    with caplog.at_level(logging.DEBUG):
        for extra in ({}, {"stream": True}, {"temperature": 7.0}, {"stop": [secret]}):
            r = httpx.post(server.v1 + "/chat/completions", headers=AUTH, timeout=60, json={
                "model": model, "messages": [{"role": "user", "content": f"say {secret}"}],
                "max_tokens": 8, **extra})
            outputs.append(r.text)
        r = httpx.post(server.v1 + "/completions", headers=AUTH, timeout=60,
                       json={"model": model, "prompt": f"the {secret}", "max_tokens": 8})
        outputs.append(r.text)
    completions = [o for o in outputs if '"content"' in o or '"text"' in o]
    logged = "\n".join(rec.getMessage() + str(rec.args) + str(rec.exc_text or "") for rec in caplog.records)
    assert secret not in logged
    for out in completions:  # nor any completion text long enough to be recognisable
        for piece in out.split('"content":"')[1:]:
            text = piece.split('"')[0]
            if len(text) >= 12:
                assert text not in logged
    print(f"\nlogging: {len(caplog.records)} log records over 5 requests at DEBUG; the prompt marker appears in none")
