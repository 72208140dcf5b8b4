"""`specgate serve`: run the OpenAI-compatible gateway under uvicorn.

Flags are generated from `GatewaySettings` (`cli.flags`) and override `SPECGATE_*`
environment variables; anything not given keeps its env/default value. Heavy imports happen
inside `run`. `--engine vllm` exits with a clear message when this build has no vLLM.
SIGTERM drains gracefully (`gateway.server.GracefulServer`, `--shutdown-timeout-s`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    from cli.flags import add_settings_flags
    from gateway.settings import GatewaySettings

    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve", help="run the OpenAI-compatible HTTP server",
        description="Serve /v1/chat/completions, /v1/completions, /v1/models, /health and /metrics.",
    )
    add_settings_flags(p, GatewaySettings)
    p.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> Any:
    from cli.flags import settings_overrides
    from gateway.settings import GatewaySettings

    return GatewaySettings(**settings_overrides(args, GatewaySettings))


def run(args: argparse.Namespace) -> int:
    import logging

    import uvicorn
    from pydantic import ValidationError

    from engine import EngineUnavailableError
    from gateway.app import create_app
    from gateway.server import GracefulServer

    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        print(f"specgate serve: invalid settings: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        app = create_app(settings)
    except EngineUnavailableError as exc:
        print(f"specgate serve: {exc}", file=sys.stderr)
        return 2
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level.lower())
    GracefulServer(config, state=app.state.gateway, deadline_s=settings.shutdown_timeout_s).run()
    return 0
