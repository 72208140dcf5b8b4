"""The SQL retry policy on a finished evaluation: what `on_invalid: "retry"` changes.

    python -m benchmarks.text2sql.retry_eval benchmarks/results/text2sql_accuracy.json [--attempts 3]

Reads the records of a `benchmarks.text2sql.evaluate` run, takes the `grammar/no-spec`
answers sqlite refused, and regenerates them as the gateway's retry policy does
(grammars.sql.options: attempts 2.. sample at `retry_temperature` 0.7 when the request was
greedy, seed = request seed + attempt) until sqlite accepts one or the attempts are spent.
Prints and writes (`<input stem>_retry.md`) run share and test-suite accuracy with the
policy, next to the original arm. Same models, prompts and suites as the evaluation.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any

from benchmarks.common import DATA
from benchmarks.text2sql.evaluate import build_suites, cpu_name
from benchmarks.text2sql.sample import extract_sql, spider_questions, text2sql_cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=pathlib.Path)
    parser.add_argument("--attempts", type=int, default=3)
    parser.add_argument("--retry-temperature", type=float, default=0.7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    import torch

    from benchmarks.suite.torch_runner import TorchRunner
    from benchmarks.suite.workloads import Workload
    from engine import loader
    from grammars.sql.check import check_sql

    torch.set_num_threads(args.threads)
    doc = json.loads(args.results.read_text())
    model = doc["model"]
    records = [r for r in doc["records"] if r["name"] == "grammar/no-spec"]
    suites = build_suites(spider_questions(DATA), DATA, model["seed"])
    cases = {c.case_id: c for c in text2sql_cases(DATA, model["per_db"], model["seed"], constrained=True)}
    workload = Workload("text2sql", tuple(cases.values()))
    target, tokenizer = loader.load(model["target"], dtype="bfloat16", device="cpu")
    runner = TorchRunner(target_model=target, draft_model=None, tokenizer=tokenizer)
    rows: list[dict[str, Any]] = []
    for record in records:
        sql, attempts = record["sql"], 1
        while attempts < args.attempts and not check_sql(sql, record_ddl(cases, record)).valid:
            again = runner.run(workload, cases[record["case_id"]], "no-spec", k=0, temperature=args.retry_temperature,
                               max_tokens=record["max_tokens"], seed=model["seed"] + attempts)
            sql, attempts = extract_sql(again.text), attempts + 1
            print(f"{record['case_id']} attempt {attempts}: {sql[:100]!r}", flush=True)
        verdict = check_sql(sql, record_ddl(cases, record))
        correct = verdict.valid and suites[record["db_id"]].match(record["gold"], sql)
        rows.append({"case_id": record["case_id"], "attempts": attempts, "runs": verdict.valid, "correct": correct,
                     "sql": sql, "error": verdict.error})
    n = len(rows)
    before_run = sum(r["runs"] for r in records) / n
    before_acc = sum(r["correct"] for r in records) / n
    text = "\n".join([
        "# SQL retry policy on the Text2SQL sample", "",
        f"CPU: {cpu_name()}. Input: `{args.results}` ({n} grammar/no-spec answers, T=0). Policy: "
        f"on_invalid=retry, max_attempts={args.attempts}, retry_temperature={args.retry_temperature}. "
        f"Command: `python -m benchmarks.text2sql.retry_eval {args.results} --attempts {args.attempts}`.", "",
        "| arm | run | exec acc | answers retried | attempts made |", "|---|---|---|---|---|",
        f"| grammar, report (plain masked sampling) | {before_run:.2f} | {before_acc:.2f} | 0 | {n} |",
        f"| grammar + retry | {sum(r['runs'] for r in rows) / n:.2f} | {sum(r['correct'] for r in rows) / n:.2f} | "
        f"{sum(r['attempts'] > 1 for r in rows)} | {sum(r['attempts'] for r in rows)} |", "",
        *[f"- {r['case_id']}: {r['attempts']} attempts, runs={r['runs']}, correct={r['correct']}: `{r['sql']}`"
          for r in rows if r["attempts"] > 1], ""])
    out = args.results.with_name(args.results.stem + "_retry.md")
    out.write_text(text)
    print(text)
    return 0


def record_ddl(cases: dict[str, Any], record: dict[str, Any]) -> str:
    return str(cases[record["case_id"]].check["ddl"])


if __name__ == "__main__":
    raise SystemExit(main())
