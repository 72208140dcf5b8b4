"""Text2SQL evaluation: gold checks on every dev question, then the model on a sample.

    python -m benchmarks.text2sql.evaluate [--per-db N] [--seed S] [--configs ...] [--no-model]

1. Gold checks (all 377 dev questions, no model): every gold query runs on every filled
   database of its suite; share with a non-empty result; the suite separates pairs of
   different gold queries of one database (its distinguishing power); the schema-aware
   grammar accepts every gold query (with the Qwen2.5 tokenizer).
2. Model (Qwen2.5-Coder 1.5B target, 0.5B draft, bf16, T=0, K=4): `--per-db` questions per
   database (0 = all 377), seeded; per configuration `arm/config` (arm `free` = no
   constraint, `grammar` = schema-aware SQL grammar; config from benchmarks.suite.configs):
   share that parse, share that run (sqlite, grammars.sql_check), test-suite execution
   accuracy (benchmarks.text2sql.suite), acceptance, end-to-end tokens/s and speed-up over
   the same arm's `no-spec`. Default configurations: free/no-spec, grammar/no-spec,
   grammar/specgate (masked draft model, K chosen per step as `specgate serve` does: adaptive,
   from the forward costs measured and cached per machine), grammar/ngram (prompt lookup +
   grammar-forced tokens); add grammar/specgate-fixed-k (K=4 every step) or
   grammar/forced-only to isolate forced tokens. They run interleaved per
   question after one unrecorded warm-up request. Unconstrained
   answers go through `extract_sql` (fences stripped); both arms are cut at the first ";".
   `max_tokens` per question = min(160, 2 x gold tokens + 16).
Writes benchmarks/results/text2sql.json and .md (or --out). Knows nothing of HTTP.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time
from collections import defaultdict
from typing import Any

from benchmarks.common import DATA, RESULTS_DIR, write_json
from benchmarks.text2sql.sample import ddl_of, extract_sql, spider_questions, text2sql_cases
from benchmarks.text2sql.suite import TestSuite

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT_CONFIGS = ("free/no-spec", "grammar/no-spec", "grammar/specgate", "grammar/ngram")
DATABASES = 8


def cpu_name() -> str:
    from engine.hardware import cpu_info

    return cpu_info().describe()


def torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def build_suites(questions: list[dict[str, Any]], data_dir: pathlib.Path, seed: int) -> dict[str, TestSuite]:
    golds: dict[str, list[str]] = defaultdict(list)
    for row in questions:
        golds[row["db_id"]].append(row["query"])
    return {db: TestSuite.build(ddl_of(data_dir, db), queries, databases=DATABASES, seed=seed)
            for db, queries in golds.items()}


def gold_checks(questions: list[dict[str, Any]], suites: dict[str, TestSuite], tokenizer: Any,
                data_dir: pathlib.Path) -> dict[str, Any]:
    from grammars import GrammarCompiler, spec_from_request

    runs = nonempty = 0
    pairs = separated = 0
    by_db: dict[str, set[str]] = defaultdict(set)
    for row in questions:
        outcomes = suites[row["db_id"]].run(row["query"])
        runs += all(o.rows is not None for o in outcomes)
        nonempty += any(o.rows for o in outcomes)
        by_db[row["db_id"]].add(row["query"])
    for db, queries in by_db.items():
        ordered = sorted(queries)
        for i, a in enumerate(ordered):
            for b in ordered[i + 1:]:
                if a.lower().split() != b.lower().split():
                    pairs += 1
                    separated += not suites[db].match(a, b)
    compiler = GrammarCompiler(tokenizer, vocab_size=151_936)
    accepted = 0
    for row in questions:
        ddl = ddl_of(data_dir, row["db_id"])
        spec = spec_from_request({"response_format": {"type": "sql", "sql": {"schema": ddl}}})
        assert spec is not None
        matcher = compiler.compile(spec).matcher()
        accepted += matcher.accept_text(row["query"]) and matcher.can_stop()
    return {"questions": len(questions), "gold_runs_everywhere": runs, "gold_nonempty_somewhere": nonempty,
            "distinct_pairs": pairs, "pairs_separated": separated, "grammar_accepts_gold": accepted,
            "databases_per_suite": DATABASES}


def run_model(args: argparse.Namespace, suites: dict[str, TestSuite], log: Any) -> dict[str, Any]:
    import torch

    from benchmarks.suite.torch_runner import TorchRunner
    from benchmarks.suite.workloads import Workload
    from engine import loader

    torch.set_num_threads(args.threads or torch.get_num_threads())
    target, tokenizer = loader.load(args.target, dtype="bfloat16", device="cpu")
    from benchmarks.suite.configs import TORCH_CONFIGS

    needs_draft = any(TORCH_CONFIGS[c.split("/")[1]].drafter == "model" for c in args.configs)
    draft = loader.load(args.draft, dtype="bfloat16", device="cpu")[0] if needs_draft else None
    runner = TorchRunner(target_model=target, draft_model=draft, tokenizer=tokenizer)
    if draft is not None:  # `specgate` then picks K as `specgate serve` does (adaptive, measured costs)
        from engine import cost_model

        runner.costs = cost_model.load_or_measure(target, draft, k_max=args.k, target_name=args.target,
                                                  draft_name=args.draft)
    arms = {arm: Workload(f"text2sql{'' if arm == 'grammar' else '-free'}",
                          tuple(text2sql_cases(args.data_dir, args.per_db, args.seed, constrained=arm == "grammar")))
            for arm in ("free", "grammar")}
    warm = "specgate" if draft is not None else args.configs[0].split("/")[1]  # warm-up (both models), unrecorded
    runner.run(arms["grammar"], arms["grammar"].cases[0], warm, k=args.k, temperature=0.0, max_tokens=4, seed=0)
    runner.clear_prefix_caches()
    records: list[dict[str, Any]] = []
    start = time.perf_counter()
    cases = list(zip(arms["free"].cases, arms["grammar"].cases, strict=True))
    for number, (free_case, grammar_case) in enumerate(cases):
        gold = grammar_case.check["gold"]
        max_tokens = min(160, 2 * len(tokenizer.encode(gold)) + 16)
        for name in args.configs:
            arm, config = name.split("/")
            case = grammar_case if arm == "grammar" else free_case
            record = runner.run(arms[arm], case, config, k=args.k, temperature=0.0, max_tokens=max_tokens,
                                seed=args.seed).as_dict()
            sql = extract_sql(record["text"])
            from grammars.sql_check import check_sql

            verdict = check_sql(sql, case.check["ddl"])
            suite = suites[case.check["db_id"]]
            record.update(name=name, db_id=case.check["db_id"], gold=gold, sql=sql, max_tokens=max_tokens,
                          parses=verdict.parses, runs=verdict.valid, sqlite_error=verdict.error,
                          correct=verdict.valid and suite.match(gold, sql))
            records.append(record)
            log(f"  {name}: {record['completion_tokens']} tokens {record['latency_s']:.1f}s "
                f"correct={record['correct']} {sql[:80]!r}")
        partial = args.out.with_suffix(".partial.json")  # a stopped run keeps what it measured
        partial.write_text(json.dumps(records))
        log(f"[{number + 1}/{len(cases)}] {grammar_case.case_id} {time.perf_counter() - start:.0f}s")
    return {"records": records, "wall_s": time.perf_counter() - start}


def _rate(records: list[dict[str, Any]]) -> float:
    """Decode tokens/s: steps after the first (which carries the prompt prefill)."""
    seconds = sum(r["decode_time_s"] for r in records)
    return sum(r["decode_tokens"] for r in records) / seconds if seconds else 0.0


def summarize(records: list[dict[str, Any]], configs: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = []
    by_name = {name: [r for r in records if r["name"] == name] for name in configs}
    for name in configs:
        rs = by_name[name]
        if not rs:
            continue
        n = len(rs)
        drafted = sum(r["draft_tokens"] or 0 for r in rs)
        accepted = sum(r["accepted_tokens"] or 0 for r in rs)
        tokens = sum(r["completion_tokens"] for r in rs)
        latency = sum(r["latency_s"] for r in rs)
        nopc = "-nopc" if name.endswith("-nopc") else ""  # prefix cache off: against no-spec with it off
        base = by_name.get(name.split("/")[0] + "/no-spec" + nopc) or []
        ttfts = sorted(r["ttft_s"] for r in rs if r.get("ttft_s") is not None)
        same = sum(a["text"] == b["text"] for a, b in zip(rs, base, strict=False)) if base else None
        rows.append({
            "config": name, "n": n, "parse": sum(r["parses"] for r in rs) / n, "run": sum(r["runs"] for r in rs) / n,
            "exec_acc": sum(r["correct"] for r in rs) / n,
            "completed": sum(r["finish_reason"] == "stop" for r in rs) / n,
            "errors": sum(r["error"] is not None for r in rs),
            "acceptance": accepted / drafted if drafted else None,
            "tokens_per_step": tokens / max(1, sum(r["steps"] for r in rs)),
            "tok_s": tokens / latency if latency else 0.0,
            "speedup": (sum(b["latency_s"] for b in base) / latency) if base and latency else None,
            "decode_tok_s": _rate(rs), "decode_speedup": (_rate(rs) / _rate(base)) if base and _rate(base) else None,
            "same_as_no_spec": (same / n) if same is not None else None,
            "ttft_p50_s": ttfts[len(ttfts) // 2] if ttfts else None,
            "cached_tokens": sum(r.get("cached_tokens") or 0 for r in rs) / n,
        })
    return rows


def markdown(doc: dict[str, Any]) -> str:
    g = doc["gold"]
    lines = ["# Text2SQL (Spider dev, test-suite execution accuracy)", "",
             f"CPU: {doc['cpu']}. Command: `{doc['command']}`.", "",
             "## Gold checks (all dev questions, no model)", "",
             f"- {g['questions']} gold queries over 8 databases, {g['databases_per_suite']} filled databases each "
             "(seeded random rows, types and foreign keys kept, query literals included).",
             f"- gold query runs on every filled database: {g['gold_runs_everywhere']}/{g['questions']}; "
             f"non-empty result on at least one: {g['gold_nonempty_somewhere']}/{g['questions']}.",
             f"- distinguishing power: {g['pairs_separated']}/{g['distinct_pairs']} pairs of different gold queries "
             "of one database are told apart (the rest are equivalent rewrites: case, column order, `>= 2014` vs "
             "`> 2013`).",
             f"- the schema-aware SQL grammar accepts {g['grammar_accepts_gold']}/{g['questions']} gold queries.", ""]
    if doc.get("model"):
        m = doc["model"]
        lines += [f"## Model: {m['target']} (target) / {m['draft']} (draft), bf16, T=0, K={m['k']}", "",
                  f"Sample: {m['per_db']} questions per database (all of a smaller one), seed {m['seed']}: "
                  f"{m['questions']} questions (dev.json indices {m['indices']}); torch threads {m['threads']}. "
                  f"Wall time {m['wall_s']:.0f} s.", "",
                  "| arm/config | n | parse | run | exec acc | completed | acceptance | tok/step | tok/s e2e | "
                  "speed-up e2e | decode tok/s | speed-up decode | = no-spec | TTFT p50 s | cached prompt tokens |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in doc["summary"]:
            def f(value: Any, spec: str = ".2f") -> str:
                return "—" if value is None else format(value, spec)
            lines.append(f"| {r['config']} | {r['n']} | {f(r['parse'])} | {f(r['run'])} | {f(r['exec_acc'])} | "
                         f"{f(r['completed'])} | {f(r['acceptance'])} | {f(r['tokens_per_step'])} | "
                         f"{f(r['tok_s'])} | {f(r['speedup'])} | {f(r['decode_tok_s'])} | "
                         f"{f(r['decode_speedup'])} | {f(r['same_as_no_spec'])} | {f(r.get('ttft_p50_s'))} | "
                         f"{f(r.get('cached_tokens'), '.0f')} |")
        refusals = [r for r in doc["records"] if r["name"].startswith("grammar/") and not r["runs"]]
        lines += ["", "Columns: parse / run = share of answers sqlite parses / compiles against the schema "
                  "(grammars.sql_check); exec acc = share whose results equal the gold query's on every filled "
                  "database; completed = stopped before max_tokens; tok/s e2e = completion tokens / request "
                  "latency (prefill included); speed-up e2e = the arm's no-spec latency / this latency; decode = "
                  "steps after the first (the first carries the prompt prefill, the same for every configuration: "
                  "what a pipeline with a cached schema prefix would see); = no-spec: identical text; cached prompt "
                  "tokens: mean prompt positions restored from the prefix cache (configurations ending -nopc run "
                  "with it off and compare against no-spec-nopc).", "",
                  f"Grammar answers sqlite refused: {len(refusals)}."]
        lines += [f"- `{r['sql']}` ({r['sqlite_error']})" for r in refusals[:12]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-db", type=int, default=3, help="questions per database (0 = all 377)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    parser.add_argument("--no-model", action="store_true", help="gold checks only")
    parser.add_argument("--target", default="qwen2.5-coder-1.5b")
    parser.add_argument("--draft", default="qwen2.5-coder-0.5b")
    parser.add_argument("-k", type=int, default=4)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--data-dir", type=pathlib.Path, default=DATA)
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS_DIR / "text2sql.json")
    args = parser.parse_args(argv)
    args.configs = tuple(c for c in args.configs.split(",") if c)
    from transformers import AutoTokenizer

    questions = spider_questions(args.data_dir)
    suites = build_suites(questions, args.data_dir, args.seed)
    tokenizer = AutoTokenizer.from_pretrained(str(args.data_dir.parent / "tokenizers" / "qwen2.5"))
    command = "python -m benchmarks.text2sql.evaluate " + " ".join(argv if argv is not None else __import__("sys").argv[1:])
    doc: dict[str, Any] = {"cpu": cpu_name(), "command": command.strip(),
                           "gold": gold_checks(questions, suites, tokenizer, args.data_dir)}
    print(json.dumps(doc["gold"]))
    if not args.no_model:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        result = run_model(args, suites, print)
        from benchmarks.text2sql.sample import stratified_sample

        indices = [i for i, _ in stratified_sample(questions, args.per_db, args.seed)]
        doc["model"] = {"target": args.target, "draft": args.draft, "k": args.k, "per_db": args.per_db,
                        "seed": args.seed, "questions": len(indices), "threads": torch_threads(), "indices": indices, "wall_s": result["wall_s"]}
        doc["records"] = result["records"]
        doc["summary"] = summarize(result["records"], args.configs)
    write_json(doc, args.out)
    args.out.with_suffix(".partial.json").unlink(missing_ok=True)
    text = markdown(doc)
    args.out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
