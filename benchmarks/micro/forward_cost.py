"""The kernel / dtype cost table: per option, decode ms/token, verify ms at n = K+1 tokens,
prefill ms at 32 and 256 tokens, peak RSS, and what speculation would be worth there.

    python -m benchmarks.micro.forward_cost                       # every option, Qwen2.5-Coder 1.5B + 0.5B
    python -m benchmarks.micro.forward_cost --options bf16,fp32 --repeats 5

Each option runs in its own child process (`--child OPTION`), because kernel selection is
fixed by environment variables read when torch loads and peak RSS is per process. Options:
- `bf16`, `fp32`: torch as installed, weights and compute in that dtype (oneDNN / MKL kernels
  at this CPU's best ISA).
- `bf16-avx2`, `fp32-avx2`: the same on an emulated CPU without AVX-512 / native bf16
  (`ATEN_CPU_CAPABILITY=avx2`, `MKL_ENABLE_INSTRUCTIONS=AVX2`, `ONEDNN_MAX_CPU_ISA=AVX2`;
  for bf16 also oneDNN off, because torch only routes bf16 matmuls to oneDNN where the CPU
  has AVX-512BW/VL/DQ, which an AVX2-only CPU lacks): the path an AVX2-only CPU takes.
  An emulation on this CPU (its caches, memory bandwidth), not a measurement of that CPU.
- `llama-cpp`: the registered models' Q4_K_M GGUFs (the files the bf16 weights are dequantized
  from) on llama.cpp's CPU kernels (`engine.torch_engine.llama_cpp_model`, llama-cpp-python built for
  x86-64-v3 by scripts/bootstrap.sh), `--threads` threads (default: every core).
- `int8-dynamic`: `torch.ao.quantization.quantize_dynamic` int8 Linear weights (fp32
  activations, fbgemm). Changes the target model: opt-in only, never chosen automatically.
- `bf16-compile`, `fp32-compile`: `torch.compile(model.forward, dynamic=True)` (inductor,
  C++ CPU kernels) over the same KVCache / DynamicCache path. Reported besides the table's
  columns: `compile_s` (the first forwards: prefill, then n = 1..9, each shape once), the
  dynamo graphs compiled by then and after all timed forwards (growth = recompiles as the
  cache grows), and the largest |logit| difference against the eager model on the same
  forwards (robustness). Prefill sizes get one untimed call first (their compile).
Timing follows `engine.pacing.cost_model` (KVCache path, 64-token context, median of `--repeats`
after a warm-up, interleaved over n). Writes `<out>.json` and `<out>.md`; prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
from typing import Any

from benchmarks.common import write_json

OPTIONS: dict[str, dict[str, Any]] = {
    "bf16": {"dtype": "bfloat16", "env": {}},
    "fp32": {"dtype": "float32", "env": {}},
    "bf16-avx2": {"dtype": "bfloat16", "onednn": False,
                  "env": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                          "ONEDNN_MAX_CPU_ISA": "AVX2"}},
    "fp32-avx2": {"dtype": "float32",
                  "env": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                          "ONEDNN_MAX_CPU_ISA": "AVX2"}},
    "int8-dynamic": {"dtype": "float32", "quantize": True, "env": {}},
    "bf16-compile": {"dtype": "bfloat16", "compile": True, "env": {}},
    "fp32-compile": {"dtype": "float32", "compile": True, "env": {}},
    "llama-cpp": {"dtype": "gguf", "llama_cpp": True, "env": {}},
}
DEFAULT_OPTIONS = ("bf16", "fp32", "llama-cpp", "bf16-avx2", "fp32-avx2", "int8-dynamic")
VERIFY_SIZES = (2, 3, 5, 9)
ALPHA = 0.8


def _prefill_ms(model: Any, n: int, *, repeats: int, warm_up: bool = False) -> float:
    import torch

    from engine.torch_engine.kv_cache import cache_for

    ids = torch.randint(0, int(model.config.vocab_size), (n,), generator=torch.Generator().manual_seed(1)).tolist()
    if warm_up:
        cache_for(model).extend(ids)
    times = []
    for _ in range(repeats):
        kv = cache_for(model)
        start = time.perf_counter()
        kv.extend(ids)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _compile(target: Any, draft: Any | None) -> dict[str, Any]:
    """Compile both models' forwards in place; time the first forwards (their compilation) and
    check the compiled logits against eager ones on the same growing cache."""
    import torch

    from engine.torch_engine.kv_cache import KVCache

    vocab = int(target.config.vocab_size)
    ids = torch.randint(0, vocab, (64 + 2 * sum(VERIFY_SIZES),), generator=torch.Generator().manual_seed(2)).tolist()
    eager = KVCache(target)
    want = [eager.extend(ids[:64])]
    at = 64
    for n in VERIFY_SIZES:  # the eager reference for the same forwards
        want.append(eager.extend(ids[at: at + n], num_logits=n))
        at += n
    for model in (target, draft):
        if model is not None:
            model.forward = torch.compile(model.forward, dynamic=True)
    start = time.perf_counter()
    kv = KVCache(target)
    got = [kv.extend(ids[:64])]
    at = 64
    for n in VERIFY_SIZES:
        got.append(kv.extend(ids[at: at + n], num_logits=n))
        at += n
    for n in range(1, max(VERIFY_SIZES) + 1):  # every verify size once more: any shape left to compile
        kv.extend(ids[at: at + n], num_logits=n)
        kv.crop(at)
    if draft is not None:
        KVCache(draft).extend(ids[:64])
    compile_s = time.perf_counter() - start
    diff = max(float((g - w).abs().max()) for g, w in zip(got, want, strict=True))
    top1 = all(bool((g.argmax(-1) == w.argmax(-1)).all()) for g, w in zip(got, want, strict=True))
    return {"compile_s": compile_s, "graphs_after_compile": _graphs(), "max_logit_diff": diff, "same_argmax": top1}


def child(option: str, args: argparse.Namespace) -> dict[str, Any]:
    import resource

    import torch

    from engine import loader
    from engine.pacing.cost_model import kernel_path, measure_forward_costs

    spec = OPTIONS[option]
    if args.threads:
        torch.set_num_threads(args.threads)
    if spec.get("onednn") is False:
        torch.backends.mkldnn.enabled = False  # type: ignore[assignment]  # a module-level flag torch types as a context property
    start = time.perf_counter()
    if spec.get("llama_cpp"):
        from engine.pacing.hardware import cpu_info

        threads = args.threads or cpu_info().cores
        target = loader.load_gguf(args.model, n_threads=threads, n_ctx=1024)[0]
        draft = loader.load_gguf(args.draft, n_threads=threads, n_ctx=1024)[0] if args.draft else None
    else:
        target = loader.load(args.model, dtype=spec["dtype"], device="cpu")[0]
        draft = loader.load(args.draft, dtype=spec["dtype"], device="cpu")[0] if args.draft else None
    if spec.get("quantize"):
        from torch.ao.quantization import quantize_dynamic

        target = quantize_dynamic(target, {torch.nn.Linear}, dtype=torch.qint8)
        draft = quantize_dynamic(draft, {torch.nn.Linear}, dtype=torch.qint8) if draft is not None else None
    load_s = time.perf_counter() - start
    compiled: dict[str, Any] = {}
    if spec.get("compile"):
        compiled = _compile(target, draft)
    costs = measure_forward_costs(target, draft, k_max=max(VERIFY_SIZES) - 1, repeats=args.repeats,
                                  target_name=args.model, draft_name=args.draft)
    prefill = {n: _prefill_ms(target, n, repeats=max(1, args.repeats - 1), warm_up=bool(compiled))
               for n in args.prefill}
    if compiled:
        compiled["graphs_after"] = _graphs()
    best_k, speedup = costs.best_k(ALPHA)
    return {**compiled,
        "option": option, "dtype": spec["dtype"], "env": spec["env"], "kernels": kernel_path(target),
        "load_s": load_s, "target_ms": [t * 1e3 for t in costs.target_s],
        "draft_ms": costs.draft_s * 1e3 if costs.draft_s is not None else None,
        "prefill_ms": {str(n): v for n, v in prefill.items()},
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "best_k_at_alpha": ALPHA, "best_k": best_k, "predicted_speedup": speedup,
        "pays_at_all": costs.pays_at_all, "costs": costs.as_dict(),
    }


def markdown(doc: dict[str, Any]) -> str:
    prefills = doc["prefill"]
    head = ("| option | decode ms/token | verify ms n=" + " / ".join(map(str, VERIFY_SIZES))
            + " | verify ÷ decode | " + " | ".join(f"prefill {n} ms" for n in prefills)
            + " | draft ms/token | peak RSS GiB | best K at α=0.8 (predicted ×) |")
    lines = [f"Forward costs on {doc['cpu']} (flags {' '.join(doc['flags'])}), {doc['threads']} threads, "
             f"torch {doc['torch']}; target {doc['model']}, draft {doc['draft']}; "
             f"`python -m benchmarks.micro.forward_cost --repeats {doc['repeats']} --threads {doc['threads']}` ({doc['wall_s']:.0f} s).", "",
             head, "|" + "---|" * (head.count("|") - 1)]
    for row in doc["rows"]:
        if "error" in row:
            lines.append(f"| {row['option']} | error: {row['error'][:120]} |")
            continue
        t = row["target_ms"]
        verify = " / ".join(f"{t[n - 1]:.0f}" for n in VERIFY_SIZES)
        ratios = " / ".join(f"{t[n - 1] / t[0]:.2f}" for n in VERIFY_SIZES)
        pre = " | ".join(f"{row['prefill_ms'][str(n)]:.0f}" for n in prefills)
        draft = f"{row['draft_ms']:.0f}" if row["draft_ms"] is not None else "—"
        best = f"K={row['best_k']} (×{row['predicted_speedup']:.2f})" if row["best_k"] else "off (×1.00)"
        lines.append(f"| {row['option']} | {t[0]:.0f} | {verify} | {ratios} | {pre} | {draft} | "
                     f"{row['peak_rss_gib']:.2f} | {best} |")
    for row in doc["rows"]:
        if "compile_s" in row:
            lines.append(f"\n`{row['option']}`: compile {row['compile_s']:.0f} s (first forwards), dynamo graphs "
                         f"{row['graphs_after_compile']} after compile, {row['graphs_after']} after all timed forwards; "
                         f"max |logit - eager| {row['max_logit_diff']:.3g}, same argmax {row['same_argmax']}.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--draft", default="qwen2.5-coder-0.5b", help="draft model ('' for none)")
    p.add_argument("--options", default=",".join(DEFAULT_OPTIONS),
                   help=f"comma-separated, of {', '.join(OPTIONS)}")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--prefill", default="32,256")
    p.add_argument("--out", default="benchmarks/results/forward_cost")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.prefill = [int(n) for n in str(args.prefill).split(",") if n]
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args)), flush=True)
        return 0
    import torch

    from engine.pacing.hardware import cpu_info

    started = time.perf_counter()
    rows = []
    for option in args.options.split(","):
        env = {**os.environ, **OPTIONS[option]["env"]}
        cmd = [sys.executable, "-m", "benchmarks.micro.forward_cost", "--child", option, "--model", args.model,
               "--draft", args.draft, "--repeats", str(args.repeats), "--threads", str(args.threads), "--prefill", ",".join(map(str, args.prefill))]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        row = json.loads(line[7:]) if line else {"option": option, "error": (proc.stderr or "no output")[-400:]}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "costs"}), flush=True)
    info = cpu_info()
    threads = args.threads or torch.get_num_threads()
    doc = {"cpu": info.model, "flags": info.key_flags, "cores": info.cores, "threads": threads,
           "torch": torch.__version__, "model": args.model, "draft": args.draft or None, "repeats": args.repeats,
           "prefill": args.prefill, "rows": rows, "wall_s": time.perf_counter() - started}
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(doc, out.with_suffix(".json"))
    out.with_suffix(".md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
