"""Per-app runtime state: settings, the engine (bound once in the lifespan), metrics, the
heap freezer (gateway.gc_heap), and the model ids this server answers to. Routers read it
with `get_state(request)`, which answers 503 (with Retry-After) until the engine is bound, while the server drains for
shutdown, and once the engine is dead or shut down.
Knows nothing about request handling."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from engine import Engine
from engine.loader import model_name
from gateway.engine_errors import engine_unavailable
from gateway.errors import APIError
from gateway.gc_heap import HeapFreezer
from gateway.metrics import GatewayMetrics
from gateway.settings import GatewaySettings


@dataclass
class GatewayState:
    settings: GatewaySettings
    metrics: GatewayMetrics
    bound_engine: Engine | None = None
    model_id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    aliases: set[str] = field(default_factory=set)
    draining: bool = False  # set by gateway.server.GracefulServer on SIGTERM: admit nothing new
    heap: HeapFreezer = field(default_factory=lambda: HeapFreezer(enabled=False))

    @property
    def engine(self) -> Engine:
        retry = str(self.settings.unavailable_retry_after_s)
        if self.bound_engine is None:
            raise APIError("The engine is still starting.", status_code=503, type="server_error",
                           code="engine_starting", headers={"Retry-After": retry})
        if self.draining:
            raise APIError("The server is shutting down.", status_code=503, type="server_error",
                           code="shutting_down", headers={"Retry-After": retry})
        dead = self.bound_engine.dead_reason
        if dead is not None:
            raise engine_unavailable(dead, retry_after_s=self.settings.unavailable_retry_after_s)
        return self.bound_engine

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    @property
    def vocab_size(self) -> int:
        return len(self.engine.tokenizer)

    def bind(self, engine: Engine) -> None:
        self.bound_engine = engine
        name = engine.model_name or model_name(self.settings.model)
        self.model_id = self.settings.served_model_name or name
        self.aliases = {self.model_id, name, self.settings.model, model_name(self.settings.model)}

    def check_model(self, model: str) -> None:
        if model not in self.aliases:
            raise APIError(
                f"The model '{model}' does not exist; this server serves '{self.model_id}'.",
                status_code=404,
                param="model",
                code="model_not_found",
            )


def get_state(request: Request) -> GatewayState:
    """The app's state, once its engine is bound (503 `engine_starting` before)."""
    state: GatewayState = request.app.state.gateway
    state.engine  # noqa: B018 - raises the 503 while the engine is starting
    return state
