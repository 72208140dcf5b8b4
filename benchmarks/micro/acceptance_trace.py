"""Per-position draft/target agreement of the real pair on bench workloads (greedy), for
fitting and checking the adaptive-K acceptance model offline.

At T=0 with a masked greedy draft, whether the draft's token at output position i equals
the target's depends only on the (correct) prefix, so one run with a long K reveals a
*match sequence* m_i (1: the draft proposed the target's token; None: not revealed, a bonus
token after a fully accepted step). Any K policy's steps are then a deterministic function of
m (a step starting at s with K drafts accepts the run of 1s from s, at most K), so policies can
be compared offline with the measured forward costs. Each step's draft and target seconds
are recorded too (draft seconds include the draft's mask and sampling work, and on the first
drafting step its prompt catch-up).

    python -m benchmarks.micro.acceptance_trace --workloads json,tools,sql,chat --cases 3 \
        --max-tokens 48 -k 8 --threads 1 --out benchmarks/results/acceptance_trace.json

Knows nothing about policies: it records; `engine.pacing.adaptive` decides.
"""

from __future__ import annotations

import argparse
import pathlib
import time
from typing import Any

from benchmarks.common import write_json


def trace_case(runner: Any, workload: Any, case: Any, *, k: int, max_tokens: int) -> dict[str, Any]:
    from engine.types import GenerationRequest, SamplingOptions

    decoder = runner.decoder("specgate-fixed-k", k)
    request = GenerationRequest(case.case_id, runner.prompt_ids(case),
                                SamplingOptions(temperature=0.0, max_tokens=max_tokens, seed=0),
                                grammar=runner.grammar(workload, case))
    seq = decoder.new_sequence(request)
    stats = seq.stats
    matches: list[int | None] = []
    forced: list[bool] = []
    steps: list[dict[str, Any]] = []
    while not seq.finished:
        before = (stats.time_draft_s, stats.time_target_s, stats.draft_forwards, len(seq.output_ids),
                  stats.draft_tokens, stats.accepted_tokens)
        fed_before = len(seq.draft_kv) if seq.draft_kv is not None else 0
        decoder.step(seq)
        drafts = stats.draft_tokens - before[4]
        accepted = stats.accepted_tokens - before[5]
        flags = decoder._forced_draft_flags(seq, drafts)
        emitted = len(seq.output_ids) - before[3]
        matches += [1] * accepted + ([0] if accepted < drafts else [])
        forced += flags[: accepted + (1 if accepted < drafts else 0)]
        if accepted == drafts:  # the bonus token's draft agreement is not revealed
            matches += [None] * (emitted - accepted)
            forced += [False] * (emitted - accepted)
        steps.append({
            "drafts": drafts, "accepted": accepted, "emitted": emitted,
            "draft_s": stats.time_draft_s - before[0], "target_s": stats.time_target_s - before[1],
            "draft_forwards": stats.draft_forwards - before[2],
            "draft_fed": (len(seq.draft_kv) - fed_before) if seq.draft_kv is not None else 0,
        })
    return {"workload": workload.name, "case_id": case.case_id, "prompt_tokens": len(request.prompt_token_ids),
            "k": k, "matches": matches[: len(seq.output_ids)], "forced": forced[: len(seq.output_ids)],
            "steps": steps}


def main(argv: list[str] | None = None) -> None:
    import torch

    from benchmarks.suite.torch_runner import TorchRunner
    from benchmarks.suite.workloads import load_workload
    from engine import loader
    from engine.pacing import cost_model
    from engine.pacing.hardware import choose_dtype, cpu_info

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="json,tools,sql,chat")
    parser.add_argument("--cases", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("-k", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--target", default="qwen2.5-coder-1.5b")
    parser.add_argument("--draft", default="qwen2.5-coder-0.5b")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", default="benchmarks/results/acceptance_trace.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype, _ = choose_dtype("auto")
    target, tokenizer = loader.load(args.target, dtype=dtype, device="cpu")
    draft = loader.load(args.draft, dtype=dtype, device="cpu")[0]
    runner = TorchRunner(target_model=target, draft_model=draft, tokenizer=tokenizer)
    costs = cost_model.load_or_measure(target, draft, k_max=args.k, target_name=args.target, draft_name=args.draft)
    data_dir = pathlib.Path(args.data_dir) if args.data_dir else None
    traces = []
    start = time.perf_counter()
    for name in args.workloads.split(","):
        workload = load_workload(name, args.cases, data_dir=data_dir)
        for case in workload.cases:
            traces.append(trace_case(runner, workload, case, k=args.k, max_tokens=args.max_tokens))
            m = "".join("?" if x is None else str(x) for x in traces[-1]["matches"])
            print(f"{name} {case.case_id[:40]}: {m}", flush=True)
    out = {"machine": {"cpu": cpu_info().describe(), "threads": args.threads, "dtype": dtype},
           "costs": costs.as_dict(), "traces": traces, "wall_s": time.perf_counter() - start}
    write_json(out, args.out)


if __name__ == "__main__":
    main()
