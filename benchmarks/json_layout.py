"""JSON whitespace layouts (grammars.json.layout) on the real target: tokens, validity, layout.

    python -m benchmarks.json_layout [--n 4] [--workload json --workload json-noschema
        --workload tools] [--max-tokens 256] [--output benchmarks/results/json_layout.md]

For each case of the bench workloads (benchmarks.suite.workloads) the target alone
(`no-spec`, greedy, llama.cpp kernels) answers three times: unconstrained (the same prompt,
tools rendered, no grammar), under the "flexible" layout and under the "conventional"
layout. Per workload and layout: completion tokens (mean and total), valid answers
(benchmarks.suite.validity), answers with whitespace before a `,` or `:` outside strings
(`gaps_before_separators`), answers laid out as the unconstrained answer is (`same_layout`:
`layout_style`, indented / one line / compact) and answers whose text equals it. Greedy decoding is
deterministic, so one pass suffices; the figures name the CPU they ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from benchmarks.common import RESULTS_DIR

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LAYOUTS = ("unconstrained", "flexible", "conventional")


def _outside_strings(text: str) -> Iterator[str]:
    """The characters of `text` outside JSON strings (each string's quotes included)."""
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                yield ch
            continue
        in_string = ch == '"'
        yield ch


def layout_style(text: str) -> str | None:
    """How the first JSON object or array in `text` is laid out, from the whitespace between
    its tokens (outside strings): "indented" (newlines), "one line" (spaces only),
    "compact" (none); None when `text` has no `{` or `[`."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return None
    depth, seen = 0, set()
    for ch in _outside_strings(text[min(starts):]):
        if ch in " \t\r\n":
            seen.add("indented" if ch == "\n" else "one line")
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                break
    return "indented" if "indented" in seen else "one line" if seen else "compact"


def gaps_before_separators(text: str) -> int:
    """Whitespace runs right before a `,` or `:` outside JSON strings."""
    count, gap = 0, False
    for ch in _outside_strings(text):
        if ch in ",:" and gap:
            count += 1
        gap = ch in " \t\n\r"
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4, help="cases per workload")
    parser.add_argument("--workload", action="append", choices=["json", "json-noschema", "tools"])
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=pathlib.Path, default=RESULTS_DIR / "json_layout.md")
    args = parser.parse_args()
    workloads = args.workload or ["json", "json-noschema", "tools"]

    from benchmarks.suite.torch_runner import TorchRunner
    from benchmarks.suite.workloads import load_workload
    from engine import loader
    from grammars import GrammarCompiler

    target, tokenizer = loader.load_gguf("qwen2.5-coder-1.5b", n_threads=args.threads, n_ctx=4096)
    runners: dict[str, Any] = {}
    for layout in LAYOUTS:
        runner = TorchRunner(target_model=target, draft_model=None, tokenizer=tokenizer)
        if layout != "unconstrained":
            runner._compilers[16] = GrammarCompiler(  # the workloads' bound, this layout
                tokenizer, vocab_size=runner.logits_width, stop_token_ids=runner.stop_ids,
                max_whitespace=16, json_whitespace=layout)  # type: ignore[arg-type]
        runners[layout] = runner
    rows: list[dict[str, Any]] = []
    for name in workloads:
        workload = load_workload(name, args.n)
        for case in workload.cases:
            texts: dict[str, str] = {}
            for layout in LAYOUTS:
                run_case = replace(case, body={}) if layout == "unconstrained" else case
                started = time.perf_counter()
                record = runners[layout].run(workload, run_case, "no-spec", k=0, temperature=0.0,
                                             max_tokens=args.max_tokens, seed=0)
                texts[layout] = record.text
                rows.append({"workload": name, "case": case.case_id, "layout": layout,
                             "tokens": record.completion_tokens, "valid": bool(record.valid),
                             "finish": record.finish_reason, "error": record.error,
                             "seconds": time.perf_counter() - started,
                             "gaps_before_separators": gaps_before_separators(record.text),
                             "text": record.text})
                print(json.dumps(rows[-1]), flush=True)  # the text too: a partial run still says it
            free_style = layout_style(texts["unconstrained"])
            for row in rows[-len(LAYOUTS):]:
                row["style"] = layout_style(row["text"])
                row["same_layout"] = free_style is not None and row["style"] == free_style
                row["same_text"] = row["text"].strip() == texts["unconstrained"].strip()
    write(args.output, rows, workloads, args)


def write(path: pathlib.Path, rows: list[dict[str, Any]], workloads: list[str],
          args: argparse.Namespace) -> None:
    lines = ["# JSON whitespace layouts on the target (Qwen2.5-Coder-1.5B Q4_K_M, greedy)", "",
             f"`python -m benchmarks.json_layout --n {args.n} "
             + " ".join(f"--workload {w}" for w in workloads) + f" --max-tokens {args.max_tokens}`; "
             f"{platform.processor() or platform.machine()}, {args.threads} threads, llama.cpp kernels.", "",
             "| workload | layout | answers | valid | tokens (mean) | tokens (total) | "
             "gap before , or : | same layout as unconstrained | same text |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in workloads:
        for layout in LAYOUTS:
            group = [r for r in rows if r["workload"] == name and r["layout"] == layout]
            if not group:
                continue
            total = sum(r["tokens"] for r in group)
            lines.append(
                f"| {name} | {layout} | {len(group)} | {sum(r['valid'] for r in group)} | "
                f"{total / len(group):.1f} | {total} | "
                f"{sum(r['gaps_before_separators'] > 0 for r in group)} | "
                f"{sum(r['same_layout'] for r in group)} | {sum(r['same_text'] for r in group)} |")
    lines += ["", "## Answers", ""]
    for row in rows:
        lines.append(f"- {row['workload']} `{row['case']}` {row['layout']}: {row['tokens']} tokens, "
                     f"valid={row['valid']}: `{json.dumps(row['text'])[1:-1][:400]}`")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    (path.with_suffix(".jsonl")).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
