"""First fills of schema-aware SQL masks, another checkout's `grammars` against this one's, in one process.

    python -m benchmarks.micro.sql_first_fill --old PATH [--cases 40] [--repeat 3] [--output FILE]

The scope layer (grammars.sql.mask.matcher) makes one verdict table per scope signature; a
signature's first fill builds it, and that is most of what a first fill costs (the
`each position filled first` row of benchmarks.micro.mask_cost). That row is one walk per run, and
on a shared 2-core VM two runs of one tree differ by more than a change worth making. Here
both trees are loaded in one process (PATH's `grammars` package copied under the name
`grammars_old`, its imports renamed), and at every position of the Spider gold queries each
tree fills once with its tables cleared, `--repeat` times, alternating which goes first
(thread CPU time). Two costs per position: the first attempt (the vocabulary's caches as the
walk so far left them, as a server's first query on a schema finds them) and the minimum over
the attempts (those caches warm: only the signature's table is built). Printed per tree: p50
/ p90 / p99 / mean of each, the median per-position ratio, and the scope readings made.

Knows nothing of engines or HTTP; measures `grammars` only.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import sys
import tempfile
import time
from typing import Any

from benchmarks.common import RESULTS_DIR, SHARED, percentile, write_report
from benchmarks.micro.mask_cost import sql_cases

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_IMPORT = re.compile(r"^(\s*)(from|import) grammars([. ])", re.MULTILINE)


def load_old(tree: pathlib.Path) -> Any:
    """`tree`/grammars imported as the package `grammars_old` (a renamed copy)."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="sg_old_"))
    shutil.copytree(tree / "grammars", root / "grammars_old")
    for path in (root / "grammars_old").rglob("*.py"):
        path.write_text(_IMPORT.sub(r"\1\2 grammars_old\3", path.read_text()))
    sys.path.insert(0, str(root))
    import grammars_old  # type: ignore[import-not-found]

    return grammars_old


def first_fills(packages: dict[str, Any], *, cases: int, repeat: int) -> dict[str, Any]:
    """Per tree: the first attempt's and the minimum first-fill time (µs) at every
    position, and the readings made."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(SHARED / "tokenizers" / "qwen2.5"))
    compilers = {name: package.GrammarCompiler(tokenizer, backend="auto", vocab_size=151_936,
                                                cache_bytes=1 << 30, compile_timeout_s=60.0)
                 for name, package in packages.items()}
    names = list(packages)
    bitmask = compilers[names[0]].allocate_bitmask(1)
    times: dict[str, list[float]] = {name: [] for name in names}
    first: dict[str, list[float]] = {name: [] for name in names}
    reads = dict.fromkeys(names, 0)
    for body, text in sql_cases(cases):
        matchers = {name: compilers[name].compile(packages[name].spec_from_request(body)).matcher()
                    for name in names}
        for position, token in enumerate(compilers[names[0]].encode(text)):
            best = dict.fromkeys(names, float("inf"))
            for attempt in range(repeat):
                for name in names if (position + attempt) % 2 == 0 else names[::-1]:
                    matcher = matchers[name]
                    matcher.forget()  # every signature table of the grammar dropped
                    matcher._signatures[-1] = None
                    checked = matcher.stats["checked"]
                    start = time.thread_time_ns()
                    matcher.fill_mask(bitmask, 0)
                    spent = (time.thread_time_ns() - start) / 1e3
                    best[name] = min(best[name], spent)
                    if attempt == 0:
                        first[name].append(spent)
                    reads[name] += matcher.stats["checked"] - checked
            for name in names:
                times[name].append(best[name])
                assert matchers[name].accept_token(token)
    return {"times": times, "first": first, "reads": reads}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=pathlib.Path, required=True, help="a checkout of another commit")
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", type=pathlib.Path, default=RESULTS_DIR / "sql_first_fill.md")
    args = parser.parse_args(argv)
    import grammars

    result = first_fills({"old": load_old(args.old), "new": grammars}, cases=args.cases, repeat=args.repeat)
    times = result["times"]
    lines = [f"# Schema-aware SQL first fills, {args.old} (old) against this tree (new)", "",
             f"`python -m benchmarks.micro.sql_first_fill --old {args.old} --cases {args.cases} "
             f"--repeat {args.repeat}`: backend auto, Qwen2.5 tokenizer, {len(times['new'])} positions "
             f"of Spider gold queries; per position {args.repeat} first fills (scope tables cleared), "
             "the first attempt's time and the minimum, thread CPU time, µs, trees alternating. "
             "Scope readings: over all attempts.", "",
             "| cost | tree | p50 | p90 | p99 | mean | median ratio new / old | scope readings |",
             "|---|---|---|---|---|---|---|---|"]
    for cost, series in (("first attempt", result["first"]), (f"min of {args.repeat}", times)):
        ratios = sorted(new / old for new, old in zip(series["new"], series["old"], strict=True))
        for name, values in series.items():
            lines.append(f"| {cost} | {name} | {percentile(values, 0.5):.0f} | {percentile(values, 0.9):.0f} | "
                         f"{percentile(values, 0.99):.0f} | {sum(values) / len(values):.0f} | "
                         f"{ratios[len(ratios) // 2]:.3f} | {result['reads'][name]:,} |")
    text = "\n".join(lines) + "\n"
    write_report(text, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
