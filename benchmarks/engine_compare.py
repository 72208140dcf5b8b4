"""Engine comparison on the real Qwen 0.5B → 1.5B pair, now a preset of `specgate bench`:
the json workload (schema in the prompt) and its unconstrained reference (chat) under
no-spec, the unmasked argmax draft (vLLM's way), specgate's masked draft and n-gram; no
sweeps, no peers. Prints the markdown table; asserts nothing.

    .venv/bin/python -m benchmarks.engine_compare [--max-tokens 64] [--dtype bfloat16] [--prompts 6] [-k 4]

The full comparison (all workloads, peers, sweeps) is `specgate bench`.
"""

from __future__ import annotations

import argparse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("-k", type=int, default=4)
    parser.add_argument("--out", default="benchmarks/results/bench_engine_compare.json")
    args = parser.parse_args()

    from benchmarks.suite.report import markdown
    from benchmarks.suite.runner import quick_settings, run_bench

    settings = quick_settings(
        workloads=("json", "chat"), configs=("no-spec", "spec-unmasked-draft", "specgate", "ngram"),
        variant_workloads=(), num_cases=args.prompts, max_tokens=args.max_tokens, k=args.k, dtype=args.dtype,
        sweep_cases=0, out=args.out,
    )
    print(markdown(run_bench(settings)))


if __name__ == "__main__":
    main()
