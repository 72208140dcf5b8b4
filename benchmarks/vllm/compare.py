"""vLLM engine: draft mask on vs off vs unconstrained, same prompts, one engine (the
specgate plugin; the mask is switched per request), at T=0 and T=0.7; optionally the
vllm-native / vllm-native-fixed baselines (one more engine each).

    flock /tmp/specgate-heavy.lock .venv/bin/python -m benchmarks.vllm.compare \
        [--prompts 6] [--max-tokens 64] [-k 4] [--baselines] [--out benchmarks/results/vllm_compare.json]

Columns: acceptance = accepted / drafts vLLM verified (the scheduler cuts unmasked drafts at
the first grammar-invalid token, so this flatters the unmasked draft); accepted/proposed =
accepted / (steps x K), the share of the K proposals per step that were kept; tokens per
step; tokens/s (completion tokens / wall time, batch 1); JSON validity. Prints a markdown
table; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from benchmarks.common import write_json

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                      "city": {"type": "string"}}, "required": ["name", "age", "city"]},
    {"type": "object", "properties": {"title": {"type": "string"}, "year": {"type": "integer"},
                                      "genres": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
     "required": ["title", "year", "genres"]},
    {"type": "object", "properties": {"product": {"type": "string"}, "price": {"type": "number"},
                                      "in_stock": {"type": "boolean"}}, "required": ["product", "price", "in_stock"]},
]
TOPICS = [
    "Tell me about a made-up person who lives in Lisbon.",
    "Recommend a classic science-fiction film.",
    "Describe a gadget you would sell in an online shop.",
    "Who is Alice? Invent her details.",
    "Name a film you would watch on a rainy day.",
    "Invent a kitchen product and its price.",
    "Describe the main character of a short story.",
    "Suggest an animated movie for kids.",
]


def prompts(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(schema-constrained bodies, the same messages unconstrained); the schema is only in
    response_format, never in the prompt."""
    constrained, free = [], []
    for i in range(n):
        messages = [{"role": "user", "content": TOPICS[i % len(TOPICS)]}]
        schema = SCHEMAS[i % len(SCHEMAS)]
        constrained.append({"messages": messages, "response_format": {
            "type": "json_schema", "json_schema": {"name": f"s{i % len(SCHEMAS)}", "schema": schema}}})
        free.append({"messages": messages})
    return constrained, free


def summarize(name: str, temperature: float, results: list[dict[str, Any]], k: int, *, check_json: bool) -> dict[str, Any]:
    toks = sum(r["completion_tokens"] for r in results)
    steps = sum(r["steps"] for r in results)
    drafted = sum(r["draft_tokens"] for r in results)
    accepted = sum(r["accepted_tokens"] for r in results)
    wall = sum(r["latency_s"] for r in results)
    valid = None
    if check_json:
        ok = 0
        for r in results:
            try:
                json.loads(r["text"])
                ok += 1
            except ValueError:
                pass
        valid = f"{ok}/{len(results)}"
    return {"run": name, "T": temperature, "requests": len(results),
            "errors": sum(1 for r in results if r["error"]), "completion_tokens": toks, "steps": steps,
            "draft_tokens": drafted, "accepted_tokens": accepted,
            "acceptance": accepted / drafted if drafted else 0.0,
            "accepted_per_proposed": accepted / (steps * k) if steps else 0.0,
            "tokens_per_step": toks / steps if steps else 0.0,
            "tokens_per_s": toks / wall if wall else 0.0, "json_valid": valid}


def table(rows: list[dict[str, Any]]) -> str:
    head = "| run | T | acceptance (verified) | accepted/proposed | tokens/step | tokens/s | drafted | accepted | JSON valid |"
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(f"| {r['run']} | {r['T']} | {r['acceptance']:.2f} | {r['accepted_per_proposed']:.2f} | "
                     f"{r['tokens_per_step']:.2f} | {r['tokens_per_s']:.2f} | {r['draft_tokens']} | "
                     f"{r['accepted_tokens']} | {r['json_valid'] or '—'} |")
    return "\n".join(lines)


async def _specgate_rows(n: int, max_tokens: int, k: int) -> list[dict[str, Any]]:
    from benchmarks.vllm.configs import build_config_engine, run_requests

    constrained, free = prompts(n)
    engine = await asyncio.to_thread(build_config_engine, "specgate-vllm", k=k)
    rows = []
    try:
        await run_requests(engine, constrained[:1], max_tokens=8, temperature=0.0, tag="warmup")
        for temperature in (0.0, 0.7):
            for name, body, mask in (("specgate-vllm, JSON schema, draft mask on", constrained, True),
                                     ("specgate-vllm, JSON schema, draft mask off", constrained, False),
                                     ("specgate-vllm, unconstrained", free, None)):
                res = await run_requests(engine, body, max_tokens=max_tokens, temperature=temperature,
                                         draft_mask=mask, tag=f"{name[-3:]}-{temperature}")
                rows.append(summarize(name, temperature, res, k, check_json=body is constrained))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        await engine.shutdown()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("-k", type=int, default=4)
    parser.add_argument("--baselines", action="store_true", help="also vllm-native and vllm-native-fixed")
    parser.add_argument("--out", default="benchmarks/results/vllm_compare.json")
    args = parser.parse_args()

    rows = asyncio.run(_specgate_rows(args.prompts, args.max_tokens, args.k))
    if args.baselines:
        from benchmarks.vllm.configs import run_vllm_config

        constrained, _ = prompts(args.prompts)
        for config in ("vllm-native", "vllm-native-fixed"):
            for temperature in (0.0, 0.7):
                res = run_vllm_config(config, constrained, max_tokens=args.max_tokens,
                                      temperature=temperature, k=args.k)
                rows.append(summarize(f"{config}, JSON schema", temperature, res, args.k, check_json=True))
    print(table(rows))
    write_json(rows, args.out)


if __name__ == "__main__":
    main()
