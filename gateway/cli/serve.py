"""`specgate serve`: run the OpenAI-compatible gateway under uvicorn.

Flags override `SPECGATE_*` environment variables (pydantic-settings); anything not given
keeps its env/default value. Heavy imports happen inside `run`. `--engine vllm` exits with a
clear message when this build has no vLLM engine.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve", help="run the OpenAI-compatible HTTP server",
        description="Serve /v1/chat/completions, /v1/completions, /v1/models, /health and /metrics.",
    )
    S = argparse.SUPPRESS
    p.add_argument("--model", default=S, help="target model name or path (default qwen2.5-coder-1.5b)")
    p.add_argument("--draft-model", dest="draft_model", default=S,
                   help="draft model name or path (default qwen2.5-coder-0.5b)")
    p.add_argument("--drafter", choices=["model", "ngram", "forced", "none"], default=S,
                   help="draft source (default model)")
    p.add_argument("-k", "--k", type=int, default=S, help="draft tokens per step (default 4)")
    p.add_argument("--draft-mask", dest="draft_mask", choices=["on", "off"], default=S,
                   help="apply the grammar mask to the draft too (default on)")
    p.add_argument("--engine", choices=["torch", "vllm"], default=S, help="engine backend (default torch)")
    p.add_argument("--host", default=S, help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=S, help="port (default 8000)")
    p.add_argument("--api-key", dest="api_key", default=S, help="require 'Authorization: Bearer <key>'")
    p.add_argument("--dtype", default=S, help="model dtype: auto (default; bfloat16 where the CPU has native "
                   "bf16, else float32), bfloat16, float32")
    p.add_argument("--adaptive-k", dest="adaptive_k", choices=["on", "off"], default=S,
                   help="pick K <= -k per step from measured costs and acceptance (default on)")
    p.add_argument("--device", default=S, help="torch device (default cpu)")
    p.add_argument("--max-model-len", dest="max_model_len", type=int, default=S)
    p.add_argument("--served-model-name", dest="served_model_name", default=S)
    p.add_argument("--max-concurrent-requests", dest="max_concurrent_requests", type=int, default=S)
    p.add_argument("--max-queue", dest="max_queue", type=int, default=S)
    p.add_argument("--max-tokens-cap", dest="max_tokens_cap", type=int, default=S)
    p.add_argument("--max-body-bytes", dest="max_body_bytes", type=int, default=S)
    p.add_argument("--stats-log-interval", dest="stats_log_interval_s", type=float, default=S,
                   help="seconds between speculation log lines (0: off; default 10)")
    p.add_argument("--log-level", dest="log_level", default=S)
    p.set_defaults(func=run)


_SETTING_KEYS = (
    "model", "draft_model", "drafter", "k", "draft_mask", "engine", "host", "port", "api_key", "dtype", "adaptive_k",
    "device", "max_model_len", "served_model_name", "max_concurrent_requests", "max_queue",
    "max_tokens_cap", "max_body_bytes", "stats_log_interval_s", "log_level",
)


def settings_from_args(args: argparse.Namespace) -> Any:
    from gateway.settings import GatewaySettings

    overrides = {key: getattr(args, key) for key in _SETTING_KEYS if hasattr(args, key)}
    if "draft_mask" in overrides:
        overrides["draft_mask"] = overrides["draft_mask"] == "on"
    if "adaptive_k" in overrides:
        overrides["adaptive_k"] = overrides["adaptive_k"] == "on"
    return GatewaySettings(**overrides)


def run(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from gateway.app import EngineUnavailableError, create_app

    settings = settings_from_args(args)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        app = create_app(settings)
    except EngineUnavailableError as exc:
        print(f"specgate serve: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level.lower())
    return 0
