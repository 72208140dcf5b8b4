"""Draft mask on vs off (or per-step K on vs off) inside ONE vLLM engine, interleaved,
repeated: a fair A/B.

    python -m benchmarks.vllm.ab [--repeats 3] [--max-tokens 48] [-k 4] [-T 0.0] \
        [--compare mask|step-k] [--draft-mask on|off] [--prompts grammar|text] \
        [--out benchmarks/results/vllm_ab.json]

`--compare step-k`: both arms draft with the mask on (`--draft-mask off`: both off); the arm is the worker's per-step draft
length (`engine.vllm.step_k_runner`, switched by `collective_rpc("specgate_step_k")` before
each request; batch 1, so the switch covers exactly that request's steps). The k applied per
step is recorded per arm ("k applied"), and acceptance is also given over verified drafts
(with per-step K, "proposed" = steps x K overcounts).

One specgate-vllm engine (Qwen2.5-Coder 1.5B target, 0.5B draft_model, probabilistic drafts)
serves every request; the arm is the per-request switch `GenerationRequest.draft_mask`
(`extra_args["specgate_draft_mask"]` in the worker). Requests run one at a time (batch 1),
prompt by prompt, and the order of the two arms alternates per prompt and per repeat (ABBA),
so drift in machine load falls on both arms alike. Prompts: two JSON-schema requests (schema
only in `response_format`) and two forced tool calls.

Per arm and repeat: decode tokens/s = (completion tokens - 1) / (time of last token - time of
first token), summed over prompts, kept apart from TTFT (prefill + first step); tokens per
verify step = completion tokens / engine steps; proposed drafts (steps x K), verified drafts
(what the scheduler sent to the rejection sampler after cutting grammar-invalid ones),
accepted drafts, and acceptance = accepted / proposed. Reports mean, min and max across
repeats. The worker's own timing (`benchmarks.vllm.configs.plugin_times`, reset before and
read after every request, so it is per arm): the plugin's host time per step by phase and
its share of the runner's step time, and the runner's step cost (target forward; rejection
sampling + draft loop) by scheduled tokens per step, split by draft path; then the torch
engine's cost model on those step costs (`engine.vllm.step_costs`): per arm the acceptance its
tokens per step imply, the expected speedup over plain steps for each K, and the best K. Asserts nothing; at T=0 it also counts prompts whose output differs between arms
(the draft mask must not change greedy output).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import statistics
from typing import Any

from benchmarks.common import write_json
from benchmarks.vllm.compare import SCHEMAS

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"]}}},
         {"type": "function", "function": {
             "name": "search_flights", "description": "Search flights",
             "parameters": {"type": "object", "properties": {"origin": {"type": "string"},
                                                             "destination": {"type": "string"},
                                                             "date": {"type": "string"}},
                            "required": ["origin", "destination", "date"]}}}]

BODIES: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "Tell me about a made-up person who lives in Lisbon."}],
     "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMAS[0]}}},
    {"messages": [{"role": "user", "content": "Recommend a classic science-fiction film."}],
     "response_format": {"type": "json_schema", "json_schema": {"name": "film", "schema": SCHEMAS[1]}}},
    {"messages": [{"role": "user", "content": "What's the weather in Paris, in celsius?"}],
     "tools": TOOLS, "tool_choice": "required"},
    {"messages": [{"role": "user", "content": "Find me a flight from Lisbon to Berlin on 2026-12-03."}],
     "tools": TOOLS, "tool_choice": "required"},
]
TEXT_BODIES: list[dict[str, Any]] = [  # no grammar: the drafts are never masked nor cut
    {"messages": [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}]},
    {"messages": [{"role": "user", "content": "Explain what a hash map is, in three sentences."}]},
    {"messages": [{"role": "user", "content": "List five fruits and the colour of each."}]},
    {"messages": [{"role": "user", "content": "Write a SQL query that counts users per country."}]},
]
ARMS = {"mask on": True, "mask off": False}
STEP_K_ARMS = {"step K on": True, "step K off": False}


async def _step_k(engine: Any, **kwargs: Any) -> dict[str, Any]:
    return dict((await engine.llm.collective_rpc("specgate_step_k", kwargs=kwargs))[0])


async def _one(engine: Any, body: dict[str, Any], *, rid: str, mask: bool, max_tokens: int,
               temperature: float, k: int, step_k: bool | None = None) -> dict[str, Any]:
    from benchmarks.vllm.configs import one_request, plugin_times

    if step_k is not None:
        await _step_k(engine, on=step_k, reset=True)
    await plugin_times(engine, reset=True)
    r = await one_request(engine, body, rid=rid, max_tokens=max_tokens, temperature=temperature, seed=0,
                          draft_mask=mask)
    if r["error"] is not None or r["ttft_s"] is None:
        raise RuntimeError(f"request {rid} failed: {r['error']}")
    times = await plugin_times(engine, reset=True)
    applied = (await _step_k(engine, reset=True))["applied"] if step_k is not None else None
    return {"times": times, "k_applied": applied, "text": r["text"], "ttft_s": r["ttft_s"], "decode_s": r["decode_s"],
            "completion_tokens": r["completion_tokens"], "steps": r["steps"],
            "proposed": max(r["proposed_tokens"], r["steps"] * k), "verified": r["draft_tokens"],
            "accepted": r["accepted_tokens"]}


def _arm_repeat(results: list[dict[str, Any]]) -> dict[str, float]:
    toks = sum(r["completion_tokens"] for r in results)
    steps = sum(r["steps"] for r in results)
    proposed = sum(r["proposed"] for r in results)
    accepted = sum(r["accepted"] for r in results)
    decode_s = sum(r["decode_s"] for r in results)
    verified = sum(r["verified"] for r in results)
    applied: dict[str, int] = {}
    for r in results:
        for key, n in (r.get("k_applied") or {}).items():
            applied[key] = applied.get(key, 0) + int(n)
    return {"decode_tok_s": sum(r["completion_tokens"] - 1 for r in results) / decode_s if decode_s else 0.0,
            "ttft_s": statistics.median(r["ttft_s"] for r in results),
            "tokens_per_step": toks / steps if steps else 0.0,
            "proposed": proposed, "verified": verified, "accepted": accepted,
            "acceptance": accepted / proposed if proposed else 0.0, "completion_tokens": toks,
            "acceptance_verified": accepted / verified if verified else 0.0, "k_applied": applied,
            "plugin_share": _share(results)}


def _share(results: list[dict[str, Any]]) -> float:
    plugin = sum((r["times"] or {}).get("plugin_s", 0.0) for r in results)
    step = sum((r["times"] or {}).get("step_s", 0.0) for r in results)
    return plugin / step if step else 0.0


async def run(repeats: int, max_tokens: int, k: int, temperature: float, compare: str = "mask",
              draft_mask: bool = True, prompts: str = "grammar") -> dict[str, Any]:
    from benchmarks.vllm.configs import build_config_engine

    engine = await asyncio.to_thread(build_config_engine, "specgate-vllm", k=k)
    from benchmarks.vllm.configs import add_times

    arms = ARMS if compare == "mask" else STEP_K_ARMS
    per: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    times: dict[str, dict[str, Any] | None] = dict.fromkeys(arms)
    differ = 0
    first, second = list(arms)
    state = None
    try:
        await _one(engine, BODIES[0], rid="warmup", mask=True, max_tokens=8, temperature=0.0, k=k)
        for rep in range(repeats):
            rows: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
            for i, body in enumerate(BODIES if prompts == "grammar" else TEXT_BODIES):
                order = list(arms) if (rep + i) % 2 == 0 else list(reversed(arms))
                outs = {}
                for arm in order:
                    mask = arms[arm] if compare == "mask" else draft_mask
                    step_k = None if compare == "mask" else arms[arm]
                    outs[arm] = await _one(engine, body, rid=f"r{rep}-p{i}-{arm.replace(' ', '_')}", mask=mask,
                                           max_tokens=max_tokens, temperature=temperature, k=k, step_k=step_k)
                    rows[arm].append(outs[arm])
                    times[arm] = add_times(times[arm], outs[arm]["times"])
                differ += int(temperature == 0.0 and outs[first]["text"] != outs[second]["text"])
            for arm in arms:
                per[arm].append(_arm_repeat(rows[arm]))
                print(f"repeat {rep} {arm}: {per[arm][-1]}", flush=True)
        if compare == "step-k":  # the worker's final cost estimates and engine-wide acceptance
            state = await _step_k(engine)
    finally:
        await engine.shutdown()
    return {"repeats": repeats, "max_tokens": max_tokens, "k": k, "temperature": temperature, "compare": compare,
            "draft_mask": draft_mask if compare == "step-k" else None, "prompt_set": prompts,
            "prompts": len(BODIES), "greedy_outputs_differing": differ if temperature == 0.0 else None,
            "per_repeat": per, "plugin_times": times, "step_k_state": state}


def table(result: dict[str, Any]) -> str:
    def spread(values: list[float], fmt: str) -> str:
        return f"{statistics.mean(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"

    head = ("| arm | decode tok/s | TTFT median s | tokens / verify step | acceptance (accepted/proposed) "
            "| proposed / verified / accepted (mean per repeat) |")
    head = head[:-1] + "| accepted / verified | k applied (steps per k, all repeats) |"
    lines = [head, "|" + "---|" * 8]
    for arm, reps in result["per_repeat"].items():
        col = {key: [r.get(key) for r in reps] for key in reps[0]}
        applied: dict[str, int] = {}
        for r in reps:
            for key, n in (r.get("k_applied") or {}).items():
                applied[key] = applied.get(key, 0) + int(n)
        k_text = ", ".join(f"{key}: {n}" for key, n in sorted(applied.items())) or "—"
        acc_v = spread(col["acceptance_verified"], ".3f") if None not in col.get("acceptance_verified", [None]) else "—"
        lines.append(f"| {arm} | {spread(col['decode_tok_s'], '.2f')} | {spread(col['ttft_s'], '.2f')} | "
                     f"{spread(col['tokens_per_step'], '.2f')} | {spread(col['acceptance'], '.3f')} | "
                     f"{statistics.mean(col['proposed']):.0f} / {statistics.mean(col['verified']):.0f} / "
                     f"{statistics.mean(col['accepted']):.0f} | {acc_v} | {k_text} |")
    lines.append("\n" + times_table(result.get("plugin_times") or {}))
    lines.append("\n" + cost_model_view(result))
    a_arm, b_arm = list(result["per_repeat"])
    on, off = result["per_repeat"][a_arm], result["per_repeat"][b_arm]
    ratios = [a["decode_tok_s"] / b["decode_tok_s"] for a, b in zip(on, off, strict=True) if b["decode_tok_s"]]
    if ratios:
        lines.append(f"\ndecode tok/s, {a_arm} / {b_arm}, per repeat: {spread(ratios, '.2f')}")
    return "\n".join(lines)


def times_table(times: dict[str, dict[str, Any] | None]) -> str:
    """The worker's own timing per arm: plugin share of step time, by phase, and the runner's
    step cost by scheduled tokens ("5m": 5 tokens, drafts masked)."""
    from engine.vllm.timing import PHASES

    lines = ["| arm | steps | step ms | plugin ms/step | plugin share | "
             + " | ".join(f"{p} ms/step" for p in PHASES) + " |", "|" + "---|" * (5 + len(PHASES))]
    for arm, t in times.items():
        if not t or not t["steps"]:
            continue
        n = t["steps"]
        lines.append(f"| {arm} | {n} | {1e3 * t['step_s'] / n:.1f} | {1e3 * t['plugin_s'] / n:.2f} | "
                     f"{t['share']:.2%} | " + " | ".join(f"{1e3 * t['phase_s'][p] / n:.2f}" for p in PHASES) + " |")
    lines += ["", "| arm | scheduled tokens | steps | execute ms | sample ms | of which propose ms |",
              "|---|---|---|---|---|---|"]
    for arm, t in times.items():
        for key, b in (t or {}).get("by_tokens", {}).items():
            n = b["steps"]
            lines.append(f"| {arm} | {key} | {n} | {1e3 * b['execute_s'] / n:.1f} | {1e3 * b['sample_s'] / n:.1f} | "
                         f"{1e3 * b['propose_s'] / n:.1f} |")
    return "\n".join(lines)


def cost_model_view(result: dict[str, Any]) -> str:
    """The torch engine's cost model on this run's vLLM step costs (both arms' steps pooled,
    `engine.vllm.step_costs`): per arm, the i.i.d. acceptance that its tokens per verify step
    imply, the expected speedup over plain steps for each K, and the K the model would pick."""
    from benchmarks.vllm.configs import add_times
    from engine.vllm.step_costs import alpha_from_tokens_per_step, forward_costs_from_times

    k = int(result["k"])
    pooled = None
    for t in (result.get("plugin_times") or {}).values():
        pooled = add_times(pooled, t)
    costs = forward_costs_from_times(pooled or {}, k=k)
    if costs is None:
        return "cost model: not enough timed steps"
    lines = [f"cost model on the measured vLLM steps: verify s by tokens 1..{k + 1} "
             f"{', '.join(f'{t:.3f}' for t in costs.target_s)}; draft s per draft {costs.draft_s:.3f} "
             f"(c = {costs.draft_ratio:.2f})", "",
             "| arm | tokens / step | implied α | " + " | ".join(f"K={j}" for j in range(1, k + 1)) + " | best K |",
             "|" + "---|" * (k + 4)]
    for arm, reps in result["per_repeat"].items():
        tau = statistics.mean(r["tokens_per_step"] for r in reps)
        alpha = alpha_from_tokens_per_step(tau, k)
        best, _ = costs.best_k(alpha)
        lines.append(f"| {arm} | {tau:.2f} | {alpha:.3f} | "
                     + " | ".join(f"{costs.speedup(alpha, j):.2f}" for j in range(1, k + 1)) + f" | {best} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("-k", type=int, default=4)
    parser.add_argument("-T", "--temperature", type=float, default=0.0)
    parser.add_argument("--compare", choices=("mask", "step-k"), default="mask",
                        help="the arms: draft mask on/off, or per-step K on/off (mask on in both)")
    parser.add_argument("--prompts", choices=("grammar", "text"), default="grammar",
                        help="grammar: 2 JSON-schema + 2 tool-call requests; text: 4 requests without a grammar")
    parser.add_argument("--draft-mask", choices=("on", "off"), default="on",
                        help="with --compare step-k: the draft mask in both arms")
    parser.add_argument("--out", default="benchmarks/results/vllm_ab.json")
    parser.add_argument("--table", metavar="JSON", help="only print the table of a saved result")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(pathlib.Path(args.table).read_text())))
        return
    result = asyncio.run(run(args.repeats, args.max_tokens, args.k, args.temperature, args.compare,
                             args.draft_mask == "on", args.prompts))
    print(table(result))
    if result["greedy_outputs_differing"] is not None:
        print(f"greedy outputs differing between arms: {result['greedy_outputs_differing']} "
              f"of {result['prompts'] * result['repeats']}")
    write_json(result, args.out)


if __name__ == "__main__":
    main()
