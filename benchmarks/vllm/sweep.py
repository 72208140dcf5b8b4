"""Concurrency sweep on the vLLM engine: 1, 4 and 16 requests in flight, a mix of JSON-schema,
tool-call and SQL requests, for `vllm-no-spec`, `vllm-native-fixed` and `specgate-vllm` (and,
named in `--configs`, `specgate-vllm-stepk`: per-step draft length, compared with specgate-vllm).

    python -m benchmarks.vllm.sweep [--levels 1,4,16] [--max-tokens 24] [-k 4] [--data-dir DIR] \
        [--configs vllm-no-spec,vllm-native-fixed,specgate-vllm] [--out benchmarks/results/vllm_sweep.json]
    python -m benchmarks.vllm.sweep --table benchmarks/results/vllm_sweep.json

One engine per configuration (`benchmarks.vllm.configs.build_config_engine`, max_num_seqs =
the highest level), started once and warmed up with one short request; then, per level c,
max(c, 3) requests drawn round-robin from the bench workloads `json`, `tools` and `sql`
(`benchmarks.suite.workloads`, the same bodies the bench sends), with exactly c in flight
(a new one starts when one ends). Per level: throughput = completion tokens / wall time of
the level, request latency p50 / p99, TTFT p50, tokens per engine step, acceptance over
proposed drafts, and the plugin's host time / the worker's step time
(`benchmarks.vllm.configs.plugin_times`, reset before each level). T=0, greedy.
Configurations run one after another (one engine in memory at a time), so their ratios carry
the machine's drift between them; levels within a configuration run back to back. Asserts
nothing; every engine process is spawned, hence the `__main__` guard.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import time
from typing import Any

from benchmarks.common import write_json
from benchmarks.suite.metrics import percentile

CONFIGS = ("vllm-no-spec", "vllm-native-fixed", "specgate-vllm")
MIX = ("json", "tools", "sql")


def mixed_bodies(n: int, *, data_dir: pathlib.Path | None = None) -> list[tuple[str, dict[str, Any]]]:
    """n (workload, body) pairs, round-robin over MIX, from the bench's own cases."""
    from benchmarks.suite.vllm_rows import case_body
    from benchmarks.suite.workloads import load_workload

    per = -(-n // len(MIX))
    cases = {name: load_workload(name, per, data_dir=data_dir).cases for name in MIX}
    return [(MIX[i % len(MIX)], case_body(cases[MIX[i % len(MIX)]][i // len(MIX)])) for i in range(n)]


async def run_level(engine: Any, bodies: list[tuple[str, dict[str, Any]]], *, concurrency: int,
                    max_tokens: int, tag: str) -> dict[str, Any]:
    from benchmarks.vllm.configs import one_request, plugin_times

    queue = list(enumerate(bodies))
    results: list[dict[str, Any]] = []

    async def worker() -> None:
        while queue:
            i, (workload, body) = queue.pop(0)
            r = await one_request(engine, body, rid=f"{tag}-{i}", max_tokens=max_tokens, temperature=0.0, seed=i)
            r["workload"] = workload
            results.append(r)

    await plugin_times(engine, reset=True)
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - start
    times = await plugin_times(engine, reset=True)
    ok = [r for r in results if r["error"] is None]
    tokens = sum(r["completion_tokens"] for r in ok)
    steps = sum(r["steps"] for r in ok)
    proposed = sum(r["proposed_tokens"] for r in ok)
    return {
        "concurrency": concurrency, "requests": len(results), "errors": [r["error"] for r in results if r["error"]],
        "wall_s": wall, "completion_tokens": tokens, "tokens_per_s": tokens / wall if wall else None,
        "latency_p50_s": percentile([r["latency_s"] for r in ok], 50),
        "latency_p99_s": percentile([r["latency_s"] for r in ok], 99),
        "ttft_p50_s": percentile([r["ttft_s"] for r in ok if r["ttft_s"] is not None], 50),
        "tokens_per_step": tokens / steps if steps else None,
        "acceptance": sum(r["accepted_tokens"] for r in ok) / proposed if proposed else None,
        "plugin_share": None if times is None else times["share"],
        "plugin_times": times,
        "per_workload_tokens": {w: sum(r["completion_tokens"] for r in ok if r["workload"] == w) for w in MIX},
    }


async def run_config(config: str, *, levels: list[int], max_tokens: int, k: int,
                     data_dir: pathlib.Path | None = None) -> list[dict[str, Any]]:
    from benchmarks.vllm.configs import build_config_engine, one_request

    engine = await asyncio.to_thread(build_config_engine, config, k=k, max_num_seqs=max(levels))
    out = []
    try:
        warm = mixed_bodies(1, data_dir=data_dir)[0][1]
        await one_request(engine, warm, rid=f"{config}-warmup", max_tokens=4, temperature=0.0, seed=0)
        for c in levels:
            level = await run_level(engine, mixed_bodies(max(c, len(MIX)), data_dir=data_dir), concurrency=c,
                                    max_tokens=max_tokens, tag=f"{config}-c{c}")
            level["config"] = config
            print(json.dumps({key: v for key, v in level.items() if key != "plugin_times"}), flush=True)
            out.append(level)
    finally:
        await engine.shutdown()
    return out


def table(result: dict[str, Any]) -> str:
    def f(value: Any, spec: str = ".2f") -> str:
        return "—" if value is None else format(value, spec)

    lines = ["| config | in flight | requests | tokens/s | latency p50 s | latency p99 s | TTFT p50 s "
             "| tokens/step | acceptance | plugin share | errors |", "|" + "---|" * 11]
    rows = result["levels"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['concurrency']} | {r['requests']} | {f(r['tokens_per_s'])} "
                     f"| {f(r['latency_p50_s'], '.1f')} | {f(r['latency_p99_s'], '.1f')} | {f(r['ttft_p50_s'], '.1f')} "
                     f"| {f(r['tokens_per_step'])} | {f(r['acceptance'], '.3f')} | {f(r['plugin_share'], '.2%')} "
                     f"| {len(r['errors'])} |")
    by = {(r["config"], r["concurrency"]): r for r in rows}
    ratios = []
    for c in sorted({r["concurrency"] for r in rows}):
        a, b, base = by.get(("specgate-vllm", c)), by.get(("vllm-native-fixed", c)), by.get(("vllm-no-spec", c))
        if a and b and a["tokens_per_s"] and b["tokens_per_s"]:
            extra = (f", ÷ vllm-no-spec {a['tokens_per_s'] / base['tokens_per_s']:.2f}"
                     if base and base["tokens_per_s"] else "")
            ratios.append(f"- {c} in flight: specgate-vllm ÷ vllm-native-fixed tokens/s "
                          f"{a['tokens_per_s'] / b['tokens_per_s']:.2f}{extra}")
        s = by.get(("specgate-vllm-stepk", c))
        if a and s and a["tokens_per_s"] and s["tokens_per_s"]:
            ratios.append(f"- {c} in flight: specgate-vllm-stepk ÷ specgate-vllm tokens/s "
                          f"{s['tokens_per_s'] / a['tokens_per_s']:.2f}")
    return "\n".join(lines + ([""] + ratios if ratios else []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="1,4,16")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("-k", type=int, default=4)
    parser.add_argument("--out", default="benchmarks/results/vllm_sweep.json")
    parser.add_argument("--data-dir", type=pathlib.Path, default=None, help="benchmark data (default: shared/data)")
    parser.add_argument("--table", metavar="JSON", help="only print the table of a saved result")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(pathlib.Path(args.table).read_text())))
        return
    levels = [int(x) for x in args.levels.split(",") if x]
    configs = [c for c in args.configs.split(",") if c]
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for config in configs:
        rows += asyncio.run(run_config(config, levels=levels, max_tokens=args.max_tokens, k=args.k,
                                       data_dir=args.data_dir))
    result = {"levels": rows, "max_tokens": args.max_tokens, "k": args.k, "mix": MIX,
              "wall_s": time.perf_counter() - started}
    print(table(result))
    write_json(result, args.out)


if __name__ == "__main__":
    main()
