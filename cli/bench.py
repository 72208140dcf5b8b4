"""`specgate bench`: specgate's configurations and its peers side by side on the Qwen pair.

    specgate bench [--quick] [--out FILE] [--md FILE] [--workloads json,tools] [--configs ...]
                   [--cases N] [--max-tokens N] [-k K] [--temperature T] [--target M] [--draft M]
    specgate bench --render FILE.json [--md FILE.md]     # re-aggregate, no measuring

Writes the JSON results (`--out`), PNG sweep plots next to it and a markdown table (`--md`,
default: the JSON path with `.md`). Defaults: quick mode → benchmarks/results/bench_quick.json,
full mode → benchmarks/results/bench.json. All logic lives in `benchmarks.suite`; heavy
imports happen inside `run`.
"""

from __future__ import annotations

import argparse
from typing import Any


def _csv(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def run(args: argparse.Namespace) -> int:
    import pathlib

    from benchmarks.suite.runner import full_settings, quick_settings, run_bench

    if args.render:
        from benchmarks.suite.report import rerender

        json_path = pathlib.Path(args.render)
        rerender(json_path, pathlib.Path(args.md) if args.md else json_path.with_suffix(".md"))
        return 0

    overrides: dict[str, Any] = {}
    for name, key in (("out", "out"), ("md", "md_out"), ("cases", "num_cases"), ("max_tokens", "max_tokens"),
                      ("k", "k"), ("temperature", "temperature"), ("target", "target"), ("draft", "draft"),
                      ("dtype", "dtype"), ("kernels", "kernels"), ("draft_kernels", "draft_kernels"), ("onednn", "onednn"), ("draft_window", "draft_window"), ("data_dir", "data_dir"), ("threads", "num_threads"),
                      ("sweep_cases", "sweep_cases"), ("seed", "seed"), ("vllm_cases", "vllm_cases"),
                      ("vllm_repeats", "vllm_repeats")):
        value = getattr(args, name)
        if value is not None:
            overrides[key] = value
    for name, key in (("workloads", "workloads"), ("configs", "configs"), ("variant_workloads", "variant_workloads"),
                      ("vllm_workloads", "vllm_workloads")):
        value = getattr(args, name)
        if value is not None:
            overrides[key] = _csv(value)
    try:
        settings = (quick_settings if args.quick else full_settings)(**overrides)
    except ValueError as exc:
        print(f"specgate bench: {exc}")
        return 2
    run_bench(settings, log=lambda line: print(line, flush=True))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("bench", help="benchmark specgate's configurations and peers side by side")
    p.add_argument("--quick", action="store_true", help="few prompts, small max_tokens, reduced sweeps (< 10 min)")
    p.add_argument("--out", default=None, help="results JSON path")
    p.add_argument("--md", default=None, help="markdown table path (default: the JSON path with .md)")
    p.add_argument("--workloads", default=None, help="comma-separated: json,tools,sql,text2sql,text2sql-free,chat,json-noschema,json-ws1")
    p.add_argument("--variant-workloads", default=None, help="comma-separated mask-sensitivity workloads ('' for none)")
    p.add_argument("--configs", default=None, help="comma-separated configuration names")
    p.add_argument("--cases", type=int, default=None, help="requests per workload")
    p.add_argument("--sweep-cases", type=int, default=None, help="requests per sweep point (0: no sweeps)")
    p.add_argument("--vllm-cases", type=int, default=None, help="requests per workload for the vLLM configurations")
    p.add_argument("--vllm-repeats", type=int, default=None,
                   help="passes over the vLLM cases in each engine (spread across passes; quick 2, full 3)")
    p.add_argument("--vllm-workloads", default=None,
                   help="comma-separated main workloads the vLLM configurations run (quick: json,tools)")
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("-k", type=int, default=None, help="draft tokens per step for the main matrix")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--target", default=None, help="target model name or directory")
    p.add_argument("--draft", default=None, help="draft model name or directory")
    p.add_argument("--dtype", choices=["auto", "bfloat16", "float32"], default=None,
                   help="model dtype (default auto, as serve: bf16 where the CPU has native bf16)")
    p.add_argument("--kernels", choices=["auto", "torch", "llama-cpp"], default=None,
                   help="CPU kernels (default auto, as serve: llama.cpp on the GGUFs where the CPU has no native bf16)")
    p.add_argument("--draft-kernels", choices=["auto", "torch", "llama-cpp"], default=None,
                   help="the draft model's CPU kernels (default auto, as serve: llama.cpp wherever it can run the draft)")
    p.add_argument("--no-onednn", dest="onednn", action="store_false", default=None,
                   help="turn torch's oneDNN off: with ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 "
                        "ONEDNN_MAX_CPU_ISA=AVX2 in the environment, the torch path of an AVX2-only CPU")
    p.add_argument("--draft-window", type=int, default=None,
                   help="the draft reads the first 4 and the last N prompt tokens (default: the engine's, 64; "
                        "0: the whole prompt; specgate-whole-prompt always reads it all)")
    p.add_argument("--data-dir", default=None, help="shared data directory (default ../shared/data)")
    p.add_argument("--threads", type=int, default=None, help="torch threads")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--render", metavar="JSON", default=None,
                   help="re-aggregate an existing results JSON and rewrite its tables (no measuring)")
    p.set_defaults(func=run)
