"""The app factory: `create_app(settings, *, engine=None) -> FastAPI`.

The lifespan builds the engine once (or takes the one given), starts it, binds its
tokenizer and grammar compiler into `app.state.gateway`, starts the periodic speculation log
line, and shuts everything down on exit. `--engine vllm` is refused with a clear error
unless this build has a vLLM engine (`engine.vllm_engine.build_vllm_engine`). Middleware:
request body size limit and per-endpoint request counting (pure ASGI, so
streams pass through unbuffered and client disconnects reach the routers). This module knows nothing about
request shapes (the routers do).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from gateway.errors import install_error_handlers
from gateway.metrics import GatewayMetrics, SpecStatsLogger
from gateway.routers import chat, completions, health, metrics, models
from gateway.security import BodySizeLimit, RequestCounter
from gateway.settings import GatewaySettings
from gateway.state import GatewayState

logger = logging.getLogger("specgate.gateway")


class EngineUnavailableError(RuntimeError):
    """The configured engine backend is not part of this build."""


def build_engine_for(settings: GatewaySettings) -> Any:
    """Build (load) the engine the settings ask for; blocking."""
    if settings.engine == "vllm":
        try:
            module = importlib.import_module("engine.vllm_engine")
            factory = module.build_vllm_engine
        except (ImportError, AttributeError) as exc:
            raise EngineUnavailableError(
                "--engine vllm is not available in this build (no vLLM engine is installed); "
                "use --engine torch"
            ) from exc
        return factory({**settings.engine_config_kwargs(), **settings.vllm_engine_kwargs()})
    from engine import EngineConfig, build_engine

    return build_engine(EngineConfig(**settings.engine_config_kwargs()))


def check_engine_available(settings: GatewaySettings) -> None:
    """Fail fast (before loading anything) when the engine backend is missing."""
    if settings.engine == "vllm" and importlib.util.find_spec("engine.vllm_engine") is None:
        raise EngineUnavailableError(
            "--engine vllm is not available in this build (no vLLM engine is installed); use --engine torch"
        )


def create_app(settings: GatewaySettings, *, engine: Any = None) -> FastAPI:
    check_engine_available(settings)
    state = GatewayState(settings=settings, metrics=GatewayMetrics())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        eng = engine if engine is not None else await asyncio.to_thread(build_engine_for, settings)
        await eng.start()
        state.bind(eng)
        stats_logger = SpecStatsLogger(state.metrics, interval_s=settings.stats_log_interval_s, k=settings.k)
        stats_logger.start()
        for note in getattr(eng, "startup_notes", ()):
            logger.info("%s", note)
        state.metrics.record_engine(eng)
        logger.info("specgate serving %s (engine %s, drafter %s, k=%d, draft mask %s)",
                    state.model_id, settings.engine, settings.drafter, settings.k,
                    "on" if settings.draft_mask else "off")
        try:
            yield
        finally:
            await stats_logger.stop()
            await eng.shutdown()

    app = FastAPI(title="specgate", version="0.1.0", lifespan=lifespan)
    app.state.gateway = state
    install_error_handlers(app)
    for module in (chat, completions, models, health, metrics):
        app.include_router(module.router)

    app.add_middleware(RequestCounter, metrics=state.metrics)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    return app
