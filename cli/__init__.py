"""The `specgate` command line: one sub-command per module in this package.

Each sub-command module exposes `register(subparsers) -> None`, which adds its parser and
sets `func` (a callable taking the parsed `argparse.Namespace` and returning an exit code).
Heavy imports (torch, transformers, vLLM) happen inside `func`, never at module import, so
`specgate --help` stays instant. This module knows nothing about what the commands do.

Process hygiene for every command: SIGTERM raises `SystemExit` (exit code 143) instead of
killing the process outright, so `finally` blocks and engine shutdowns run (`specgate serve`
replaces this with uvicorn's own graceful handling while it serves); and at exit, child
processes still alive (vLLM's EngineCore, which takes its workers down with it) get SIGTERM,
then SIGKILL after 10 s. A SIGTERM'd `specgate bench` leaves no process behind.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import multiprocessing
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

_COMMAND_MODULES = ("serve", "generate", "models", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specgate",
        description="Constrained-decoding-aware LLM gateway with grammar-masked speculative decoding.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in _COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def reap_children(timeout_s: float = 10.0) -> int:
    """Terminate (then kill) the child processes still alive; returns how many there were."""
    children = [c for c in multiprocessing.active_children() if c.is_alive()]
    for child in children:
        child.terminate()
    deadline = time.monotonic() + timeout_s
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()
            child.join(1.0)
    return len(children)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    atexit.register(reap_children)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
