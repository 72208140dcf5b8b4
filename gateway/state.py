"""Per-app runtime state: settings, the engine (with its tokenizer and grammar compiler,
created once in the lifespan), metrics, and the model ids this server answers to.
Routers read it from `request.app.state.gateway`. Knows nothing about request handling."""

from __future__ import annotations

import pathlib
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from gateway.errors import APIError
from gateway.metrics import GatewayMetrics
from gateway.settings import GatewaySettings


@dataclass
class GatewayState:
    settings: GatewaySettings
    metrics: GatewayMetrics
    engine: Any = None
    model_id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    aliases: set[str] = field(default_factory=set)

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    @property
    def vocab_size(self) -> int:
        return len(self.engine.tokenizer)

    def bind(self, engine: Any) -> None:
        self.engine = engine
        name = str(getattr(engine, "model_name", "") or self.settings.model)
        self.model_id = self.settings.served_model_name or name
        self.aliases = {self.model_id, name, self.settings.model, pathlib.Path(self.settings.model).name}

    def check_model(self, model: str) -> None:
        if model not in self.aliases:
            raise APIError(
                f"The model '{model}' does not exist; this server serves '{self.model_id}'.",
                status_code=404,
                param="model",
                code="model_not_found",
            )


def get_state(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    if state.engine is None:
        raise APIError("The engine is still starting.", status_code=503, type="server_error",
                       code="engine_starting", headers={"Retry-After": "5"})
    return state
