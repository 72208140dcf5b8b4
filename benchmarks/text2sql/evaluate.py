"""Text2SQL evaluation: gold checks on every question, then the model on a stream of questions
over many databases, as a Text2SQL service sees them (a new schema on many requests).

    python -m benchmarks.text2sql.evaluate [--families spider,bird] [--per-db N] [--max-tokens M]
        [--seed S] [--configs ...] [--kernels auto] [--draft-kernels auto] [--no-model]

Database families: Spider dev (8 databases) and BIRD mini-dev (6 databases, BIRD's evidence
line appended to the question), `benchmarks.text2sql.questions`.
1. Gold checks (every question of each family, no model): every gold query runs on every
   filled database of its suite (seeded rows, types and foreign keys kept, the gold queries'
   literals included: `benchmarks.text2sql.suite`); share with a non-empty result; the suite
   separates pairs of different gold queries of one database (its distinguishing power); the
   schema-aware grammar accepts the gold query (with the Qwen2.5 tokenizer).
2. Model (Qwen2.5-Coder 1.5B target, 0.5B draft, T=0, K=4, kernels chosen as `specgate serve`
   does: `--kernels auto`): `--per-db` questions per database (seeded), interleaved
   round-robin over the databases of all families, so the first pass meets every schema for the
   first time; per question every configuration `arm/config` runs in turn (arm `free` = no
   constraint, `grammar` = schema-aware SQL grammar; config from benchmarks.suite.configs:
   `no-spec`, `specgate` = what `specgate serve` does, adaptive K from the forward costs
   measured and cached per machine). One unrecorded warm-up request on a schema outside the
   stream comes first. Unconstrained answers go through `extract_sql`; both arms are cut at
   the first ";". `max_tokens` is `--max-tokens` for every question.
   Per record: parse / run (sqlite, grammars.sql.check), test-suite execution accuracy, a
   dead end (the grammar allowed no token: the request's error, counted, never a crash), a
   runaway (stopped by max_tokens), tokens per step, latency, whether the question was the
   first on its database, the step drafting started and which output-length record paced it.
   Summaries per family, per database and for first-seen against seen schemas: execution
   accuracy, dead ends, runaways, tokens per step and end-to-end speed-up over the same arm's
   `no-spec` on the same questions.
Writes benchmarks/results/text2sql.json and .md (or --out); a stopped run leaves
`<out>.partial.json`, and `--records <that file>` renders the tables from the questions it
finished (no model). Knows nothing of HTTP.
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
from benchmarks.text2sql.questions import (
    FAMILIES,
    Question,
    load_questions,
    question_case,
    question_stream,
)
from benchmarks.text2sql.sample import ddl_of, extract_sql
from benchmarks.text2sql.suite import TestSuite

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT_CONFIGS = ("free/no-spec", "grammar/no-spec", "grammar/specgate")
DATABASES = 8
WARM_UP_DDL = "CREATE TABLE item (item_id INTEGER PRIMARY KEY, name TEXT, price REAL);"  # outside the stream


def cpu_name() -> str:
    """The CPU model with its family / model numbers and key flags (no machine paths)."""
    from engine.pacing.hardware import cpu_info

    info = cpu_info()
    numbers = {}
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("cpu family", "model") and key.strip() not in numbers:
                numbers[key.strip()] = value.strip()
    except OSError:
        pass
    where = f" (family {numbers['cpu family']} model {numbers['model']})" if len(numbers) == 2 else ""
    return f"{info.model}{where}, {info.cores} cores, flags {' '.join(info.key_flags) or 'none'}"


def torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def build_suites(questions: list[dict[str, Any]], data_dir: pathlib.Path, seed: int) -> dict[str, TestSuite]:
    """Spider dev rows (dev.json's dicts) -> a suite per database (`benchmarks.text2sql.retry_eval`)."""
    golds: dict[str, list[str]] = defaultdict(list)
    for row in questions:
        golds[row["db_id"]].append(row["query"])
    return {db: TestSuite.build(ddl_of(data_dir, db), queries, databases=DATABASES, seed=seed)
            for db, queries in golds.items()}


def family_suites(questions: list[Question], seed: int) -> dict[str, TestSuite]:
    """A suite per `family/db_id`, filled with the literals of all its gold queries."""
    golds: dict[str, list[str]] = defaultdict(list)
    ddls: dict[str, str] = {}
    for q in questions:
        golds[f"{q.family}/{q.db_id}"].append(q.gold)
        ddls[f"{q.family}/{q.db_id}"] = q.ddl
    return {key: TestSuite.build(ddls[key], queries, databases=DATABASES, seed=seed) for key, queries in golds.items()}


def gold_checks(questions: list[Question], suites: dict[str, TestSuite], tokenizer: Any) -> dict[str, Any]:
    """Per family: gold queries that run everywhere / return rows somewhere, pairs told apart,
    gold queries the schema-aware grammar accepts."""
    from grammars import GrammarCompiler, GrammarError, spec_from_request

    compiler = GrammarCompiler(tokenizer, vocab_size=151_936)
    out: dict[str, Any] = {}
    for family in sorted({q.family for q in questions}):
        qs = [q for q in questions if q.family == family]
        runs = nonempty = pairs = separated = accepted = 0
        by_db: dict[str, set[str]] = defaultdict(set)
        for q in qs:
            outcomes = suites[f"{family}/{q.db_id}"].run(q.gold)
            runs += all(o.rows is not None for o in outcomes)
            nonempty += any(o.rows for o in outcomes)
            by_db[q.db_id].add(q.gold)
        for db, queries in by_db.items():
            ordered = sorted(queries)
            for i, a in enumerate(ordered):
                for b in ordered[i + 1:]:
                    if a.lower().split() != b.lower().split():
                        pairs += 1
                        separated += not suites[f"{family}/{db}"].match(a, b)
        refused: list[str] = []
        for q in qs:
            spec = spec_from_request({"response_format": {"type": "sql", "sql": {"schema": q.ddl}}})
            assert spec is not None
            try:
                matcher = compiler.compile(spec).matcher()
                ok = matcher.accept_text(q.gold) and matcher.can_stop()
            except GrammarError:
                ok = False
            accepted += ok
            if not ok:
                refused.append(q.case_id)
        out[family] = {"questions": len(qs), "databases": len(by_db), "gold_runs_everywhere": runs,
                       "gold_nonempty_somewhere": nonempty, "distinct_pairs": pairs, "pairs_separated": separated,
                       "grammar_accepts_gold": accepted, "grammar_refuses": refused[:20],
                       "databases_per_suite": DATABASES}
    return out


def load_pair(args: argparse.Namespace, *, needs_draft: bool, log: Any) -> tuple[Any, Any, Any, str]:
    """(target, draft or None, tokenizer, kernels line) on the kernels `specgate serve` picks."""
    from engine import loader
    from engine.pacing.hardware import choose_dtype, cpu_info
    from engine.torch_engine.kernels import choose_draft_kernels, choose_kernels

    threads = args.threads or cpu_info().cores
    kernels, why = choose_kernels(args.kernels, device="cpu", models=[args.target])
    dtype = choose_dtype("auto")[0]

    def load(name: str, on: str) -> tuple[Any, Any]:
        if on == "llama-cpp":
            return loader.load_gguf(name, n_threads=threads, n_ctx=4096)  # type: ignore[no-any-return]
        return loader.load(name, dtype=dtype, device="cpu")

    target, tokenizer = load(args.target, kernels)
    line = f"target kernels {kernels} ({why})"
    draft = None
    if needs_draft:
        draft_kernels, draft_why = choose_draft_kernels(args.draft_kernels, device="cpu", draft=args.draft)
        draft = load(args.draft, draft_kernels)[0]
        line += f"; draft kernels {draft_kernels} ({draft_why})"
    log(line)
    return target, draft, tokenizer, line


def _is_dead_end(error: str | None) -> bool:
    return error is not None and "dead end" in error


def run_model(args: argparse.Namespace, stream: list[Question], suites: dict[str, TestSuite], log: Any) -> dict[str, Any]:
    import torch

    from benchmarks.suite.configs import TORCH_CONFIGS
    from benchmarks.suite.torch_runner import TorchRunner
    from benchmarks.suite.workloads import Case, Workload
    from engine.pacing import cost_model
    from grammars.sql.check import check_sql

    if args.threads:
        torch.set_num_threads(args.threads)
    needs_draft = any(TORCH_CONFIGS[c.split("/")[1]].drafter == "model" for c in args.configs)
    target, draft, tokenizer, kernels = load_pair(args, needs_draft=needs_draft, log=log)
    runner = TorchRunner(target_model=target, draft_model=draft, tokenizer=tokenizer)
    costs_lines: list[str] = []
    if draft is not None:  # `specgate` then picks K as `specgate serve` does (adaptive, measured costs)
        runner.costs = cost_model.load_or_measure(target, draft, k_max=args.k, target_name=args.target,
                                                  draft_name=args.draft)
        costs_lines = runner.costs.describe()
        for line in costs_lines:
            log(line)
    arms = {arm: Workload(f"text2sql{'' if arm == 'grammar' else '-free'}",
                          tuple(question_case(q, constrained=arm == "grammar") for q in stream))
            for arm in ("free", "grammar")}
    warm_q = Question("warm-up", 0, "warm_up", "List the name of every item.", "SELECT name FROM item", WARM_UP_DDL)
    warm = Workload("text2sql-warm-up", (question_case(warm_q, constrained=True),))
    for name in args.configs:  # every configuration's decoder and both models warmed, unrecorded
        arm, config = name.split("/")
        case: Case = warm.cases[0]
        runner.run(warm, case, config, k=args.k, temperature=0.0, max_tokens=4, seed=0, scope=arm)
    runner.clear_prefix_caches()
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    start = time.perf_counter()
    for number, (q, free_case, grammar_case) in enumerate(zip(stream, arms["free"].cases, arms["grammar"].cases,
                                                           strict=True)):
        db_key = f"{q.family}/{q.db_id}"
        new_schema = db_key not in seen
        seen.add(db_key)
        for name in args.configs:
            arm, config = name.split("/")
            case = grammar_case if arm == "grammar" else free_case
            record = runner.run(arms[arm], case, config, k=args.k, temperature=0.0, max_tokens=args.max_tokens,
                                seed=args.seed, scope=arm).as_dict()  # arms never share a cached prompt
            sql = extract_sql(record["text"])
            verdict = check_sql(sql, q.ddl)
            record.update(name=name, family=q.family, db_id=q.db_id, new_schema=new_schema, gold=q.gold, sql=sql,
                          max_tokens=args.max_tokens, parses=verdict.parses, runs=verdict.valid,
                          sqlite_error=verdict.error, dead_end=_is_dead_end(record["error"]),
                          runaway=record["finish_reason"] == "length",
                          correct=record["error"] is None and verdict.valid and suites[db_key].match(q.gold, sql))
            records.append(record)
            log(f"  {name}: {record['completion_tokens']} tokens / {record['steps']} steps "
                f"{record['latency_s']:.1f}s draft@{record.get('first_draft_step')} "
                f"record={record.get('pacing_record')!r} correct={record['correct']}"
                f"{' DEAD END' if record['dead_end'] else ''}{' RUNAWAY' if record['runaway'] else ''} {sql[:70]!r}")
        partial = args.out.with_suffix(".partial.json")  # a stopped run keeps what it measured
        partial.write_text(json.dumps({"records": records, "wall_s": time.perf_counter() - start,
                                       "kernels": kernels, "costs": costs_lines}))
        log(f"[{number + 1}/{len(stream)}] {q.case_id} ({db_key}{', new schema' if new_schema else ''}) "
            f"{time.perf_counter() - start:.0f}s")
    return {"records": records, "wall_s": time.perf_counter() - start, "kernels": kernels, "costs": costs_lines}


def _rate(records: list[dict[str, Any]]) -> float:
    """Decode tokens/s: steps after the first (which carries the prompt prefill)."""
    seconds = sum(r["decode_time_s"] for r in records)
    return sum(r["decode_tokens"] for r in records) / seconds if seconds else 0.0


def summarize(records: list[dict[str, Any]], configs: tuple[str, ...]) -> list[dict[str, Any]]:
    """One row per (scope, configuration): scopes `all`, each family, each family/database,
    and `first on its database` / `database seen before`. Speed-ups are over the same arm's
    `no-spec` on the same questions (latency sums)."""
    scopes: dict[str, Any] = {"all": lambda r: True}
    for family in sorted({r["family"] for r in records}):
        scopes[family] = lambda r, f=family: r["family"] == f
    scopes["first on its database"] = lambda r: r["new_schema"]
    scopes["database seen before"] = lambda r: not r["new_schema"]
    for key in sorted({f"{r['family']}/{r['db_id']}" for r in records}):
        scopes[key] = lambda r, k=key: f"{r['family']}/{r['db_id']}" == k
    rows = []
    for scope, keep in scopes.items():
        chosen = [r for r in records if keep(r)]
        by_name = {name: [r for r in chosen if r["name"] == name] for name in configs}
        for name in configs:
            rs = by_name[name]
            if not rs:
                continue
            n = len(rs)
            drafted = sum(r["draft_tokens"] or 0 for r in rs)
            accepted = sum(r["accepted_tokens"] or 0 for r in rs)
            tokens = sum(r["completion_tokens"] for r in rs)
            latency = sum(r["latency_s"] for r in rs)
            base = by_name.get(name.split("/")[0] + "/no-spec") or []
            model_drafter = any(r.get("first_draft_step") for r in rs) or name.endswith("specgate")
            rows.append({
                "scope": scope, "config": name, "n": n,
                "run": sum(r["runs"] for r in rs) / n, "exec_acc": sum(r["correct"] for r in rs) / n,
                "dead_ends": sum(r["dead_end"] for r in rs), "runaways": sum(r["runaway"] for r in rs),
                "closed": sum(bool(r.get("closing_tokens")) for r in rs),
                "errors": sum(r["error"] is not None for r in rs),
                "acceptance": accepted / drafted if drafted else None,
                "tokens_per_step": tokens / max(1, sum(r["steps"] for r in rs)),
                "tok_s": tokens / latency if latency else 0.0,
                "speedup": (sum(b["latency_s"] for b in base) / latency) if base and latency else None,
                "decode_speedup": (_rate(rs) / _rate(base)) if base and _rate(base) and _rate(rs) else None,
                "same_as_no_spec": (sum(a["text"] == b["text"] for a, b in zip(rs, base, strict=True)) / n
                                    if base and len(base) == n else None),
                "drafted_from_first_decode_step": (sum(r.get("first_draft_step") == 2 for r in rs) / n
                                                   if model_drafter else None),
                "paced_by": ({level or "none": sum((r.get("pacing_record") or "") == level for r in rs)
                              for level in ("exact", "family", "kind", "")} if model_drafter else None),
            })
    return rows


def _f(value: Any, spec: str = ".2f") -> str:
    return "—" if value is None else format(value, spec)


def markdown(doc: dict[str, Any]) -> str:
    lines = ["# Text2SQL: Spider dev and BIRD mini-dev, test-suite execution accuracy", "",
             f"CPU: {doc['cpu']}. Date: {doc['date']}. Command: `{doc['command']}`.", "",
             "## Gold checks (every question, no model)", "",
             "| family | questions | databases | gold runs on every filled db | gold returns rows somewhere | "
             "pairs told apart | grammar accepts gold |", "|---|---|---|---|---|---|---|"]
    for family, g in doc["gold"].items():
        lines.append(f"| {family} | {g['questions']} | {g['databases']} | {g['gold_runs_everywhere']} | "
                     f"{g['gold_nonempty_somewhere']} | {g['pairs_separated']}/{g['distinct_pairs']} | "
                     f"{g['grammar_accepts_gold']} |")
    lines += ["", f"Each database is filled {DATABASES} times (seeded rows, types and foreign keys kept, the gold "
              "queries' literals included). A gold query that returns no rows on any filled database is "
              "matched by any other query returning none: those questions test less.", ""]
    if doc.get("model"):
        m = doc["model"]
        lines += [f"## Model: {m['target']} (target) / {m['draft']} (draft), T=0, K={m['k']}, max_tokens "
                  f"{m['max_tokens']}", "",
                  f"{m['kernels']}. Stream: {m['per_db']} questions per database over {m['databases']} databases "
                  f"({', '.join(m['families'])}), round-robin in a seeded order (seed {m['seed']}): {m['questions']} "
                  f"questions, {m['first_seen']} of them the first on their database. Wall time {m['wall_s']:.0f} s.",
                  ""]
        lines += [f"Forward costs: {line}" for line in m.get("costs", [])] + [""]
        header = ("| scope | arm/config | n | run | exec acc | dead ends | runaways | closed | acceptance | tok/step | "
                  "speed-up e2e | speed-up decode | = no-spec | drafted from 1st decode step | paced by "
                  "(exact/family/kind/none) |")
        rule = "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"

        def table(keep: Any) -> list[str]:
            out = [header, rule]
            for r in doc["summary"]:
                if keep(r["scope"]):
                    paced = r["paced_by"]
                    paced_text = "/".join(str(paced[k]) for k in ("exact", "family", "kind", "none")) if paced else "—"
                    out.append(f"| {r['scope']} | {r['config']} | {r['n']} | {_f(r['run'])} | {_f(r['exec_acc'])} | "
                               f"{r['dead_ends']} | {r['runaways']} | {r.get('closed', 0)} | {_f(r['acceptance'])} | "
                               f"{_f(r['tokens_per_step'])} | {_f(r['speedup'])} | {_f(r['decode_speedup'])} | "
                               f"{_f(r['same_as_no_spec'])} | {_f(r['drafted_from_first_decode_step'])} | "
                               f"{paced_text} |")
            return out

        lines += ["### Per family, and first-seen against seen databases", ""]
        lines += table(lambda scope: "/" not in scope)
        lines += ["", "### Per database", ""]
        lines += table(lambda scope: "/" in scope)
        lines += ["", "Columns: run = share of answers sqlite compiles against the schema (grammars.sql.check); exec "
                  "acc = share whose results equal the gold query's on every filled database; dead ends = requests "
                  "where the grammar allowed no token (an error, counted; exec acc counts them wrong); runaways = "
                  "answers stopped by max_tokens; closed = answers a closing ended (close_within_max_tokens, "
                  "grammars.closing); tok/step = completion tokens per target forward; speed-up e2e = "
                  "the same arm's no-spec latency over this configuration's, summed over the same questions "
                  "(prefill included); decode = steps after the first; = no-spec: identical text; drafted from 1st "
                  "decode step = share of requests whose draft model drafted at step 2 (step 1 is the target's "
                  "prefill); paced by = the output-length record that decided the draft's prompt prefill at the first "
                  "decode step (the exact grammar's, its family's, its kind's, or none: the rental).", ""]
        dead = [r for r in doc["records"] if r["dead_end"]]
        lines += [f"Dead ends: {len(dead)}."] + [f"- {r['name']} {r['case_id']} ({r['family']}/{r['db_id']}): "
                                                 f"{r['error'][:160]}" for r in dead[:12]]
        runaways = [r for r in doc["records"] if r["runaway"] and r["name"].startswith("grammar/")]
        lines += ["", f"Grammar runaways: {len(runaways)}."] + [
            f"- {r['name']} {r['case_id']} ({r['family']}/{r['db_id']}): `{r['sql'][:160]}`" for r in runaways[:12]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES), help="database families: spider,bird")
    parser.add_argument("--per-db", type=int, default=2, help="questions per database (0 = all)")
    parser.add_argument("--max-tokens", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    parser.add_argument("--no-model", action="store_true", help="gold checks only")
    parser.add_argument("--target", default="qwen2.5-coder-1.5b")
    parser.add_argument("--draft", default="qwen2.5-coder-0.5b")
    parser.add_argument("--kernels", default="auto", choices=("auto", "torch", "llama-cpp"))
    parser.add_argument("--draft-kernels", default="auto", choices=("auto", "torch", "llama-cpp"))
    parser.add_argument("-k", type=int, default=4)
    parser.add_argument("--threads", type=int, default=0, help="model threads (0: every core)")
    parser.add_argument("--data-dir", type=pathlib.Path, default=DATA)
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS_DIR / "text2sql.json")
    parser.add_argument("--cases", default="",
                        help="only these questions of the stream, by case id (e.g. bird-80,spider-151)")
    parser.add_argument("--records", type=pathlib.Path, default=None,
                        help="summarize the records of an earlier run (its .partial.json if it was stopped), no model")
    args = parser.parse_args(argv)
    args.configs = tuple(c for c in args.configs.split(",") if c)
    families = tuple(f for f in args.families.split(",") if f)
    from transformers import AutoTokenizer

    by_family = {family: load_questions(args.data_dir, family) for family in families}
    questions = [q for qs in by_family.values() for q in qs]
    suites = family_suites(questions, args.seed)
    tokenizer = AutoTokenizer.from_pretrained(str(args.data_dir.parent / "tokenizers" / "qwen2.5"))
    command = "python -m benchmarks.text2sql.evaluate " + " ".join(argv if argv is not None else __import__("sys").argv[1:])
    doc: dict[str, Any] = {"cpu": cpu_name(), "date": time.strftime("%Y-%m-%d"), "command": command.strip(),
                           "gold": gold_checks(questions, suites, tokenizer)}
    print(json.dumps(doc["gold"]))
    if not args.no_model:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        stream = question_stream(by_family, args.per_db, args.seed)
        if args.cases:
            wanted = set(args.cases.split(","))
            stream = [q for q in stream if q.case_id in wanted]
            if len(stream) != len(wanted):
                parser.error(f"--cases not in the stream: {sorted(wanted - {q.case_id for q in stream})}")
        if args.records is not None:  # an earlier run's records (a stopped run: the questions it finished)
            saved = json.loads(args.records.read_text())
            result = saved if isinstance(saved, dict) else {"records": saved, "wall_s": 0.0, "kernels": "", "costs": []}
            done = {r["case_id"] for r in result["records"]}
            stream = [q for q in stream if q.case_id in done]
        else:
            result = run_model(args, stream, suites, lambda line: print(line, flush=True))
        doc["model"] = {"target": args.target, "draft": args.draft, "k": args.k, "per_db": args.per_db,
                        "max_tokens": args.max_tokens, "seed": args.seed, "families": list(families),
                        "databases": len({(q.family, q.db_id) for q in stream}), "questions": len(stream),
                        "first_seen": sum(r["new_schema"] for r in result["records"]) // max(1, len(args.configs)),
                        "threads": args.threads or "all cores", "kernels": result["kernels"],
                        "costs": result["costs"], "stream": [q.case_id for q in stream], "wall_s": result["wall_s"]}
        doc["records"] = result["records"]
        doc["summary"] = summarize(result["records"], args.configs)
    write_json(doc, args.out)
    if args.records is None:
        args.out.with_suffix(".partial.json").unlink(missing_ok=True)
    text = markdown(doc)
    args.out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
