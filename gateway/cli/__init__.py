"""The `specgate` command line: one sub-command per module in this package.

Each sub-command module exposes `register(subparsers) -> None`, which adds its parser and
sets `func` (a callable taking the parsed `argparse.Namespace` and returning an exit code).
Heavy imports (torch, transformers, vLLM) happen inside `func`, never at module import, so
`specgate --help` stays instant. This module knows nothing about what the commands do.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
