"""Bearer-token auth (`--api-key`), exposure of the operational routes, and the request body
size limit.

`require_api_key` is a FastAPI dependency on the `/v1` routers: with a key configured, a
missing or wrong `Authorization: Bearer <key>` is a 401 in OpenAI's envelope (the key is
compared with `hmac.compare_digest`, constant time). `exposure(field)` guards `/health` and
`/metrics` by the settings field `health_access` / `metrics_access`: "public" (open), "api_key"
(as /v1), "off" (404, as if the route did not exist). `RequestCounter` counts requests by route
and status; `BodySizeLimit` is a pure ASGI middleware answering 413 once a body exceeds the
limit (by Content-Length or by counting streamed chunks). `tenant_of` names whose history
drafts a request shares (the engine's `GenerationRequest.tenant`): a hash of the bearer token and
the request's `user`, so two callers share drafts only when both are equal.
Nothing here logs a header or a body.
Knows nothing about the API."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import APIError, error_payload


def tenant_of(request: Request, user: str | None) -> str:
    """An opaque tenant name: sha256 of the Authorization header and the `user` field."""
    header = request.headers.get("authorization", "")
    return hashlib.sha256(f"{header}\0{user or ''}".encode()).hexdigest()[:32]


async def require_api_key(request: Request) -> None:
    key = request.app.state.gateway.settings.api_key
    if key is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.get_secret_value().encode()):
        raise APIError(
            "Incorrect or missing API key: send 'Authorization: Bearer <key>'.",
            status_code=401,
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )


def exposure(field: str) -> Callable[[Request], Awaitable[None]]:
    """A dependency applying the access setting `field` ("public" | "api_key" | "off")."""

    async def check(request: Request) -> None:
        access = getattr(request.app.state.gateway.settings, field)
        if access == "off":
            raise APIError("Not Found", status_code=404, type="not_found_error", code="not_found")
        if access == "api_key":
            await require_api_key(request)

    return check


class RequestCounter:
    """Counts every HTTP request by route template and final status (pure ASGI middleware)."""

    def __init__(self, app: ASGIApp, *, metrics: Any) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def tracking_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"
            self.metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()


class _TooLarge(Exception):
    pass


class BodySizeLimit:
    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._reject(send)
                return
        seen = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not response_started:
                await self._reject(send)

    async def _reject(self, send: Send) -> None:
        body = json.dumps(
            error_payload(f"Request body exceeds {self.max_bytes} bytes.", code="request_too_large")
        ).encode()
        headers: list[Any] = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})



