"""The torch engine under concurrency: throughput and latency with 1, 4 and 8 requests in
flight, speculation against no speculation, over HTTP.

    python -m benchmarks.concurrency --levels 1,4,8 --per-client 2 --max-tokens 48 \\
        --out benchmarks/results/concurrency.json

Starts one `specgate serve` per configuration on the bundled pair (`benchmarks.suite.served`,
all at once: an idle server costs no CPU), then for each level runs every configuration in
turn (interleaved, so machine noise spreads over all of them) with `benchmarks.load.run_load`:
`level` clients, `level * per_client` streaming JSON-schema and tool-call requests (seeded,
T = `--temperature`), no hang-ups. Reports per cell completion tokens/s, requests/s, p50 / p99
latency and TTFT, and throughput over the same level's no-spec; writes the JSON and a markdown
table next to it (`<stem>.md`). Configurations:
- `no-spec`: `--drafter none`;
- `specgate`: the server's defaults (speculation at any load, adaptive K);
- `specgate-switch-at-4`: the defaults with the load switch `--max-spec-concurrency 4`
  (speculation off above 4 requests in flight).
Knows nothing of the engine's internals: HTTP only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import time
from contextlib import ExitStack
from typing import Any

CONFIGS: dict[str, list[str]] = {
    "no-spec": ["--drafter", "none"],
    "specgate": [],
    "specgate-switch-at-4": ["--max-spec-concurrency", "4"],
}
API_KEY = "concurrency-bench"


def _cell(report: Any) -> dict[str, Any]:
    return {
        "completed": report.completed, "requests": report.requests, "errors": dict(report.errors),
        "lost": report.lost, "completion_tokens": report.completion_tokens, "wall_s": round(report.wall_s, 2),
        "tokens_per_s": round(report.tokens_per_s, 3), "requests_per_s": round(report.requests_per_s, 4),
        "latency_p50_s": round(report.percentile(report.latencies_s, 0.5), 2),
        "latency_p99_s": round(report.percentile(report.latencies_s, 0.99), 2),
        "ttft_p50_s": round(report.percentile(report.ttfts_s, 0.5), 2),
        "ttft_p99_s": round(report.percentile(report.ttfts_s, 0.99), 2),
    }


def markdown(document: dict[str, Any]) -> str:
    machine = document["machine"]
    lines = [
        "# The torch engine under concurrency",
        "",
        f"{machine['cpu']} ({machine['flags']}), {machine['cores']} cores; "
        f"bundled pair, `{document['command']}`.",
        "",
        "| in flight | configuration | tokens/s | x no-spec | req/s | latency p50 / p99 s | TTFT p50 / p99 s | completed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for level, cells in document["levels"].items():
        base = cells.get("no-spec", {}).get("tokens_per_s") or 0.0
        for name, cell in cells.items():
            ratio = f"{cell['tokens_per_s'] / base:.2f}" if base else "-"
            lines.append(
                f"| {level} | {name} | {cell['tokens_per_s']:.2f} | {ratio} | {cell['requests_per_s']:.3f} | "
                f"{cell['latency_p50_s']:.1f} / {cell['latency_p99_s']:.1f} | {cell['ttft_p50_s']:.1f} / "
                f"{cell['ttft_p99_s']:.1f} | {cell['completed']}/{cell['requests']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from benchmarks.load import run_load
    from benchmarks.suite.report import machine_info
    from benchmarks.suite.served import serve

    p = argparse.ArgumentParser(prog="python -m benchmarks.concurrency", description=__doc__.split("\n\n")[0])
    p.add_argument("--levels", default="1,4,8", help="requests in flight, comma-separated")
    p.add_argument("--per-client", type=int, default=2, help="requests per client at each level")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--flags", default="", help="extra `specgate serve` flags for every configuration")
    p.add_argument("--out", default="benchmarks/results/concurrency.json")
    args = p.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",") if x]
    names = [x for x in args.configs.split(",") if x]
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown:
        p.error(f"unknown configurations {unknown}; expected some of {sorted(CONFIGS)}")
    extra = args.flags.split()
    started = time.perf_counter()
    machine = machine_info()
    document: dict[str, Any] = {
        "command": "python -m benchmarks.concurrency " + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
        "machine": {"cpu": machine["cpu"], "flags": " ".join(machine["cpu_flags"]) if isinstance(
            machine["cpu_flags"], (list, tuple)) else str(machine["cpu_flags"]), "cores": machine["cpu_count"]},
        "levels": {},
    }
    with ExitStack() as stack:
        servers = {name: stack.enter_context(serve([*CONFIGS[name], *extra], api_key=API_KEY)) for name in names}
        for name, served in servers.items():  # one unrecorded request each: first-forward set-up
            asyncio.run(run_load(served.base_url, api_key=API_KEY, clients=1, requests=1, drop=0.0, max_tokens=4,
                                 kinds=("json",)))
            print(f"{name}: ready at {served.base_url}", flush=True)
        for level in levels:
            cells: dict[str, Any] = {}
            for name, served in servers.items():
                report = asyncio.run(run_load(
                    served.base_url, api_key=API_KEY, clients=level, requests=level * args.per_client, drop=0.0,
                    max_tokens=args.max_tokens, seed=level, kinds=("json", "tools"), temperature=args.temperature,
                    timeout_s=3600.0))
                cells[name] = _cell(report)
                print(f"{level} in flight, {name}: {report.summary()}", flush=True)
            document["levels"][str(level)] = cells
    document["wall_s"] = round(time.perf_counter() - started, 1)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(document))
    print(markdown(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
