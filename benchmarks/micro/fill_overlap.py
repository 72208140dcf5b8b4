"""A drafter's mask fill beside its draft forward: in sequence, or overlapped in a thread.

    python -m benchmarks.micro.fill_overlap [--threads 2] [--repeat 40] [--output FILE]

Loads the 0.5B draft's Q4_K_M GGUF with llama-cpp-python (`--threads` threads; the draft's
kernels by default) and a schema-aware SQL grammar on a Spider database. Times, as medians
of `--repeat`, one-token draft forwards (`Llama.eval`) alone, a scoped SQL first fill (scope
tables cleared) alone, the two in sequence (a drafter's row after the forward that evicted
the caches), and the forward in a thread while this thread fills (both wait only on the last
draft token, and the llama.cpp call releases the GIL). The question it answers: does
overlapping the fill with the forward pay on this CPU?

Knows nothing of the engine's drafter loop; measures llama.cpp and `grammars` only.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import RESULTS_DIR, SHARED, write_report
from benchmarks.micro.mask_cost import sql_cases

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RESULTS = RESULTS_DIR / "fill_overlap.md"
CASES = ("forward", "fill", "forward then fill", "forward ‖ fill")


def median_ms(fn: Callable[[], object], *, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def table(medians: dict[str, float]) -> list[str]:
    """Markdown rows: each case's median and its ratio to forward-then-fill."""
    sequential = medians["forward then fill"]
    return ["| case | median ms | / forward then fill |", "|---|---|---|"] + [
        f"| {case} | {medians[case]:.2f} | {medians[case] / sequential:.3f} |" for case in CASES]


def measure(*, threads: int, repeat: int) -> dict[str, float]:
    import llama_cpp
    from transformers import AutoTokenizer

    import grammars
    from engine.models import gguf_for

    tokenizer = AutoTokenizer.from_pretrained(str(SHARED / "tokenizers" / "qwen2.5"))
    compiler = grammars.GrammarCompiler(tokenizer, backend="auto", vocab_size=151_936)
    bitmask = compiler.allocate_bitmask(1)
    body, query = sql_cases(40)[5]
    spec = grammars.spec_from_request(body)
    assert spec is not None
    matcher: Any = compiler.compile(spec).matcher()  # a ScopedSqlMatcher: forget() and its signatures
    tokens = compiler.encode(query)
    for token in tokens[:8]:  # a position after a word: a first fill there reads the most
        assert matcher.accept_token(token)
    gguf = gguf_for("qwen2.5-coder-0.5b")
    if gguf is None:
        raise SystemExit("no GGUF for qwen2.5-coder-0.5b (run scripts/bootstrap.sh and the server once)")
    llm = llama_cpp.Llama(str(gguf), n_threads=threads, n_ctx=1024, verbose=False)
    prompt = tokenizer.encode(query)
    llm.eval(prompt)

    def forward() -> None:
        if llm.n_tokens > 900:
            llm.n_tokens = len(prompt)  # keep the context short: the cache past it is overwritten
        llm.eval([tokens[0]])

    def fill() -> None:
        matcher.forget()  # the scope tables: every fill a first fill, as a drafter's row
        matcher._signatures[-1] = None
        matcher.fill_mask(bitmask, 0)

    def in_sequence() -> None:
        forward()
        fill()

    def overlapped() -> None:
        worker = threading.Thread(target=forward)
        worker.start()
        fill()
        worker.join()

    runs = {"forward": forward, "fill": fill, "forward then fill": in_sequence, "forward ‖ fill": overlapped}
    medians = {case: median_ms(fn, repeat=repeat) for case, fn in runs.items()}
    medians["forward then fill"] = min(medians["forward then fill"], median_ms(in_sequence, repeat=repeat))
    medians["forward ‖ fill"] = min(medians["forward ‖ fill"], median_ms(overlapped, repeat=repeat))
    return medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--output", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args(argv)
    from engine.pacing.hardware import cpu_info

    medians = measure(threads=args.threads, repeat=args.repeat)
    cpu = cpu_info()
    lines = ["# Drafter mask fill beside the draft forward", "",
             f"`python -m benchmarks.micro.fill_overlap --threads {args.threads} --repeat {args.repeat}` on "
             f"{cpu.model} ({cpu.cores} cores; {' '.join(cpu.key_flags)}): qwen2.5-coder-0.5b Q4_K_M on "
             f"llama.cpp, {args.threads} thread(s); a schema-aware SQL first fill (Spider, scope tables cleared). Medians, ms; the "
             "pairs are the better of two passes.", "", *table(medians)]
    write_report("\n".join(lines) + "\n", args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
