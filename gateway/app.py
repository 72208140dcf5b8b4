"""The app factory: `create_app(settings, *, engine=None) -> FastAPI`.

The lifespan builds the engine once from `settings.engine_config()` with
`engine.build_engine` (or takes the one given), starts it, binds it into `app.state.gateway`,
starts the periodic speculation log line, freezes the startup heap (gateway.gc_heap, unless
`gc_freeze` is off), and shuts everything down on exit (in-flight
requests then fail with a 503 `engine_unavailable`; uvicorn first gives them
`shutdown_timeout_s` to finish, see `cli.serve`). A backend this build cannot run
(`--engine vllm` without vLLM) raises `engine.EngineUnavailableError` here, before anything
loads.
Middleware, outermost first: request body size limit (413), per-endpoint request counting,
strict JSON bodies (`gateway.json_guard`: 400 for invalid UTF-8, duplicate keys, lone
surrogates...), and CORS only when `cors_allow_origins` is set. All pure ASGI except CORS,
so streams pass through unbuffered and client disconnects reach the routers. This module knows
nothing about request shapes (the routers do).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from engine import Engine, build_engine
from engine.build import check_backend_available
from gateway.errors import install_error_handlers
from gateway.gc_heap import HeapFreezer
from gateway.json_guard import StrictJsonBody
from gateway.metrics import GatewayMetrics, SpecStatsLogger
from gateway.routers import chat, completions, health, metrics, models
from gateway.security import BodySizeLimit, RequestCounter
from gateway.settings import GatewaySettings
from gateway.state import GatewayState

logger = logging.getLogger("specgate.gateway")


def create_app(settings: GatewaySettings, *, engine: Engine | None = None) -> FastAPI:
    """The app; `engine` (already built) is used instead of building one from `settings`."""
    config = settings.engine_config()
    if engine is None:
        check_backend_available(config)  # EngineUnavailableError before loading anything
    state = GatewayState(settings=settings, metrics=GatewayMetrics(), heap=HeapFreezer(enabled=settings.gc_freeze))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        eng = engine if engine is not None else await asyncio.to_thread(build_engine, config)
        await eng.start()
        state.bind(eng)
        state.metrics.watch_engine(eng)
        stats_logger = SpecStatsLogger(state.metrics, interval_s=settings.stats_log_interval_s, k=settings.k)
        stats_logger.start()
        for note in eng.startup_notes:
            logger.info("%s", note)
        state.metrics.record_engine(eng)
        frozen = state.heap.freeze("startup")
        if frozen:
            logger.info("garbage collector: %d startup objects frozen (full collections skip them)", frozen)
        state.metrics.gc_pauses.install()  # pauses while serving, from here on
        logger.info("specgate serving %s (engine %s, drafter %s, k=%d, draft mask %s)",
                    state.model_id, settings.engine, settings.drafter, settings.k,
                    "on" if settings.draft_mask else "off")
        try:
            yield
        finally:
            state.metrics.gc_pauses.uninstall()
            await stats_logger.stop()
            await eng.shutdown()

    app = FastAPI(title="specgate", version="0.1.0", lifespan=lifespan)
    app.state.gateway = state
    install_error_handlers(app)
    for module in (chat, completions, models, health, metrics):
        app.include_router(module.router)

    origins = [o.strip() for o in settings.cors_allow_origins.split(",") if o.strip()]
    if origins:
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=["GET", "POST", "OPTIONS"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(StrictJsonBody)
    app.add_middleware(RequestCounter, metrics=state.metrics)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    return app
