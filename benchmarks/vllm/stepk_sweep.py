"""Per-step K on vs off at several requests in flight, inside ONE specgate-vllm engine,
interleaved: the concurrency counterpart of `benchmarks.vllm.ab --compare step-k`.

    python -m benchmarks.vllm.stepk_sweep [--levels 4,16] [--max-tokens 48] [--repeats 2] [-k 4] \
        [--data-dir DIR] [--out benchmarks/results/vllm_stepk_sweep.json]

One engine (max_num_seqs = the highest level). Per repeat and level the two arms run back to
back in alternating order (ABBA across repeats and levels), each on the same bodies
(`benchmarks.vllm.sweep.mixed_bodies`: JSON, tools, SQL round-robin, T=0), the arm switched in
the worker by `collective_rpc("specgate_step_k", kwargs={"on": ...})` between runs (no request
in flight then). Per run: tokens/s (completion tokens / wall), the worker's step seconds and
steps (`plugin_times`), tokens per step, and the k applied per step (`applied`). Reports per
level and arm the mean and the within-repeat ratio on / off of tokens/s and of worker seconds.
Asserts nothing; spawns the engine, hence the `__main__` guard.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import statistics
from typing import Any

from benchmarks.common import write_json

ARMS = {"step K on": True, "step K off": False}


async def run(levels: list[int], *, max_tokens: int, repeats: int, k: int,
              data_dir: pathlib.Path | None) -> dict[str, Any]:
    from benchmarks.vllm.configs import build_config_engine
    from benchmarks.vllm.sweep import MIX, mixed_bodies, run_level

    engine = await asyncio.to_thread(build_config_engine, "specgate-vllm", k=k, max_num_seqs=max(levels))
    runs: list[dict[str, Any]] = []

    async def step_k(**kwargs: Any) -> dict[str, Any]:
        return dict((await engine.llm.collective_rpc("specgate_step_k", kwargs=kwargs))[0])

    try:
        # every body once before timing: its grammar compiled and its prompt in vLLM's prefix
        # cache for both arms alike (without this the second arm of a level reuses the first's
        # prefills: 2.2x tokens/s at 16 in flight with the same steps)
        warm = mixed_bodies(max(max(levels), len(MIX)), data_dir=data_dir)
        await run_level(engine, warm, concurrency=max(levels), max_tokens=1, tag="warm")
        for rep in range(repeats):
            for j, c in enumerate(levels):
                bodies = mixed_bodies(max(c, len(MIX)), data_dir=data_dir)
                order = list(ARMS) if (rep + j) % 2 == 0 else list(reversed(ARMS))
                for arm in order:
                    await step_k(on=ARMS[arm], reset=True)
                    level = await run_level(engine, bodies, concurrency=c, max_tokens=max_tokens,
                                            tag=f"r{rep}-c{c}-{ARMS[arm]}")
                    state = await step_k(reset=True)
                    times = level.get("plugin_times") or {}
                    row = {"repeat": rep, "concurrency": c, "arm": arm, "tokens_per_s": level["tokens_per_s"],
                           "completion_tokens": level["completion_tokens"], "wall_s": level["wall_s"],
                           "worker_step_s": times.get("step_s"), "worker_steps": times.get("steps"),
                           "tokens_per_step": level["tokens_per_step"], "errors": level["errors"],
                           "k_applied": state.get("applied"), "step_k_state": state}
                    print({key: v for key, v in row.items() if key != "step_k_state"}, flush=True)
                    runs.append(row)
    finally:
        await step_k(on=False)
        await engine.shutdown()
    return {"levels": levels, "max_tokens": max_tokens, "repeats": repeats, "k": k, "runs": runs}


def table(result: dict[str, Any]) -> str:
    def spread(values: list[float]) -> str:
        return f"{statistics.mean(values):.2f} ({min(values):.2f}–{max(values):.2f})" if values else "—"

    lines = ["| in flight | arm | tokens/s | worker s | worker steps | tokens/step | k applied (steps per k) |",
             "|---|---|---|---|---|---|---|"]
    runs = result["runs"]
    ratio_lines = []
    for c in result["levels"]:
        for arm in ARMS:
            rows = [r for r in runs if r["concurrency"] == c and r["arm"] == arm]
            applied: dict[str, int] = {}
            for r in rows:
                for key, n in (r["k_applied"] or {}).items():
                    applied[key] = applied.get(key, 0) + int(n)
            lines.append(f"| {c} | {arm} | {spread([r['tokens_per_s'] for r in rows])} | "
                         f"{spread([r['worker_step_s'] for r in rows if r['worker_step_s']])} | "
                         f"{spread([float(r['worker_steps']) for r in rows if r['worker_steps']])} | "
                         f"{spread([r['tokens_per_step'] for r in rows if r['tokens_per_step']])} | "
                         + (", ".join(f"{key}: {n}" for key, n in sorted(applied.items())) or "—") + " |")
        on = {r["repeat"]: r for r in runs if r["concurrency"] == c and r["arm"] == "step K on"}
        off = {r["repeat"]: r for r in runs if r["concurrency"] == c and r["arm"] == "step K off"}
        tps = [on[i]["tokens_per_s"] / off[i]["tokens_per_s"] for i in on if i in off and off[i]["tokens_per_s"]]
        work = [off[i]["worker_step_s"] / on[i]["worker_step_s"] for i in on
                if i in off and on[i]["worker_step_s"] and off[i]["worker_step_s"]]
        ratio_lines.append(f"- {c} in flight, within a repeat: tokens/s on ÷ off {spread(tps)}; "
                           f"worker seconds off ÷ on {spread(work)}")
    return "\n".join(lines + [""] + ratio_lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="4,16")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("-k", type=int, default=4)
    parser.add_argument("--data-dir", type=pathlib.Path, default=None)
    parser.add_argument("--out", default="benchmarks/results/vllm_stepk_sweep.json")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",") if x]
    result = asyncio.run(run(levels, max_tokens=args.max_tokens, repeats=args.repeats, k=args.k,
                             data_dir=args.data_dir))
    print(table(result))
    write_json(result, args.out)
    pathlib.Path(args.out).with_suffix(".md").write_text(table(result) + "\n")


if __name__ == "__main__":
    main()
