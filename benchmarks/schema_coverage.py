"""Real-world JSON schemas per backend: coverage, compile time, valid accepted, invalid rejected.

    python -m benchmarks.schema_coverage [--backend auto --backend xgrammar ...]
        [--set jsonschemabench --set maskbench_heldout] [--category NAME ...] [--limit N]
        [--timeout S] [--property-order schema|any]
        [--disk-cache]   (only: compile vs load time from the on-disk grammar cache)
    python -m benchmarks.schema_coverage --compare BASE.json OTHER.json   (paired table)

For every schema of every category of each set (`../shared/data/<set>/*.jsonl`, records
`{schema, tests:[{data}]}`), per backend, through specgate's `GrammarCompiler` (cache cleared
before each schema; `--timeout` is its compile_timeout_s, so a schema past it counts as
refused): compile coverage, compile time p50 / p99 over the schemas that compile, and, with
python-jsonschema (format checking on) as the oracle, the share of valid instances accepted
(`accept_text` and `can_stop`) and of invalid ones rejected. Also two keyword tables over
all sets: for invalid instances accepted, the keyword python-jsonschema reports the
instance breaks; for valid instances refused, each keyword of the schema (how often it
occurs among refused instances vs all valid ones). Writes benchmarks/results/
schema_coverage.md (and .json) and prints the tables. A timed-out xgrammar compile keeps
one core busy until it ends (xgrammar cannot be interrupted): later compile times in the
same run read high, so run xgrammar with a generous --timeout and read its times as upper
bounds.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import sys
import time
from typing import Any

from benchmarks.common import DATA, RESULTS_DIR, SHARED, percentile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def load_set(name: str, limit: int | None,
             categories: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for path in sorted((DATA / name).glob("*.jsonl")):
        if categories and path.stem not in categories:
            continue
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out[path.stem] = records[:limit] if limit else records
    return out


def schema_keywords(schema: Any) -> set[str]:
    from grammars.json.policy import iter_subschemas

    return {key for _, sub in iter_subschemas(schema) for key in sub}


def oracle(schema: Any) -> Any:
    import jsonschema

    try:
        cls = jsonschema.validators.validator_for(schema)
        return cls(schema, format_checker=cls.FORMAT_CHECKER)
    except Exception:  # noqa: BLE001 - a schema python-jsonschema cannot load is skipped
        return None


# values of every JSON type and shape: a grammar that accepts one the oracle refuses leaves
# part of the schema unconstrained (xgrammar drops some `allOf` / `oneOf` forms whole)
LOOSE_PROBES: tuple[Any, ...] = ([[1]], {"specgate-probe": [[]]}, "specgate-probe", -0.5, None)


def measure(compiler: Any, records: list[dict[str, Any]], stats: dict[str, Any]) -> dict[str, Any]:
    from grammars import GrammarError, GrammarSpec
    from grammars.spec import canonical_json

    times: list[float] = []
    compiled_n = valid_n = valid_ok = invalid_n = invalid_ok = 0
    refusals: collections.Counter[str] = collections.Counter()
    verdicts: list[list[Any]] = []  # [schema index, test index, oracle valid, accepted, backend]
    loose: list[int] = []  # schemas whose grammar accepts a probe the oracle refuses
    for index, record in enumerate(records):
        schema = record["schema"]
        compiler.clear_cache()
        start = time.perf_counter()
        try:
            compiled = compiler.compile(
                GrammarSpec("json_schema", canonical_json(schema), (("strict", False),)))
        except GrammarError as exc:
            refusals[exc.message[:70]] += 1
            continue
        times.append(time.perf_counter() - start)
        compiled_n += 1
        validator = oracle(schema)
        if validator is None:
            continue
        if any(_accepts(compiled, json.dumps(probe)) and not validator.is_valid(probe)
               for probe in LOOSE_PROBES):
            loose.append(index)
        keywords = schema_keywords(schema)
        for test_index, test in enumerate(record.get("tests", [])):
            try:
                truth = validator.is_valid(test["data"])
            except Exception:  # noqa: BLE001
                continue
            got = _accepts(compiled, json.dumps(test["data"]))
            verdicts.append([index, test_index, bool(truth), got, compiled.backend])
            if truth:
                valid_n += 1
                valid_ok += got
                for key in keywords:
                    stats["valid_with"][key] += 1
                    stats["refused_with"][key] += not got
            else:
                invalid_n += 1
                invalid_ok += not got
                if got:
                    broken = {e.validator for e in validator.iter_errors(test["data"])}
                    for key in broken:
                        stats["accepted_invalid"][str(key)] += 1
    return {"schemas": len(records), "compiled": compiled_n, "times": times,
            "valid": [valid_ok, valid_n], "invalid": [invalid_ok, invalid_n],
            "refusals": dict(refusals), "verdicts": verdicts, "loose": loose}


def _accepts(compiled: Any, text: str) -> bool:
    matcher = compiled.matcher()
    return bool(matcher.accept_text(text) and matcher.can_stop())


def disk_cache_timing(tokenizer: Any, backends: list[str], data: dict[str, Any],
                      timeout: float) -> str:
    """Per backend: compile time vs load time from the DiskGrammarCache (a second compiler
    on the same directory, as after a restart), over every schema that compiles."""
    import tempfile

    from grammars import GrammarCompiler, GrammarError, GrammarSpec
    from grammars.disk_cache import DiskGrammarCache
    from grammars.spec import canonical_json

    rows = []
    for backend in backends:
        with tempfile.TemporaryDirectory() as directory:
            writer, reader = (GrammarCompiler(
                tokenizer, backend=backend, vocab_size=151_936, compile_timeout_s=timeout,  # type: ignore[arg-type]
                disk_cache=DiskGrammarCache(directory, max_bytes=1 << 32)) for _ in range(2))
            compile_s: list[float] = []
            load_s: list[float] = []
            for categories in data.values():
                for records in categories.values():
                    for record in records:
                        spec = GrammarSpec("json_schema", canonical_json(record["schema"]),
                                           (("strict", False),))
                        try:
                            compiled = writer.compile(spec)
                        except GrammarError:
                            continue
                        start = time.perf_counter()
                        loaded = reader.compile(spec)
                        if loaded.from_disk:
                            load_s.append(time.perf_counter() - start)
                            compile_s.append(compiled.compile_time_s)
            size = sum(p.stat().st_size for p in pathlib.Path(directory).glob("*.grammar"))
        rows.append([backend, str(len(load_s)),
                     f"{1000 * percentile(compile_s, 0.5):.1f} / {1000 * percentile(compile_s, 0.99):.1f}",
                     f"{1000 * percentile(load_s, 0.5):.1f} / {1000 * percentile(load_s, 0.99):.1f}",
                     f"{sum(compile_s):.1f} / {sum(load_s):.1f}", f"{size / 1e6:.1f}"])
    return table(["backend", "schemas", "compile ms p50 / p99", "load ms p50 / p99",
                  "total s compile / load", "MB on disk"], rows)


def oracle_verdicts(records: list[dict[str, Any]],
                    keys: list[tuple[int, int]]) -> dict[tuple[int, int], bool]:
    """`{(schema index, test index): valid}` under the oracle as installed now (a run's
    stored label depends on which format checkers were installed then)."""
    validators: dict[int, Any] = {}
    out = {}
    for index, test_index in keys:
        if index not in validators:
            validators[index] = oracle(records[index]["schema"])
        validator = validators[index]
        if validator is None:
            continue
        try:
            out[(index, test_index)] = bool(
                validator.is_valid(records[index]["tests"][test_index]["data"]))
        except Exception:  # noqa: BLE001 - as in measure()
            continue
    return out


def paired(base_path: str, other_path: str) -> str:
    """Per category, over the instances of the schemas BOTH runs compiled: valid accepted and
    invalid rejected by each, every instance labelled afresh by the oracle as installed (so
    runs stored under different format checkers compare), and the valid instances only the
    base accepts, and how many of those are on schemas where the base run's grammar is loose
    (accepts a LOOSE_PROBES value the oracle refuses; "?" for a run stored without it)."""
    base = json.loads(pathlib.Path(base_path).read_text())
    other = json.loads(pathlib.Path(other_path).read_text())
    rows = []
    relabelled = 0
    for key, res in other.items():
        if key == "keyword_stats":
            continue
        _, set_name, category = key.split("|")
        base_key = next((k for k in base if k.split("|")[1:] == [set_name, category]), None)
        if base_key is None:
            continue
        mine = {(v[0], v[1]): v for v in res["verdicts"]}
        theirs = {(v[0], v[1]): v for v in base[base_key]["verdicts"]}
        both = sorted(set(mine) & set(theirs))
        records = load_set(set_name, None)[category]
        truth = oracle_verdicts(records, both)
        relabelled += sum(truth[k] != mine[k][2] for k in truth)
        valid = [k for k in both if truth.get(k) is True]
        invalid = [k for k in both if truth.get(k) is False]
        only = [k for k in valid if theirs[k][3] and not mine[k][3]]
        base_loose = base[base_key].get("loose")
        loose = "?" if base_loose is None else str(sum(k[0] in set(base_loose) for k in only))
        rows.append([f"{set_name}/{category}", str(len(valid)),
                     str(sum(theirs[k][3] for k in valid)), str(sum(mine[k][3] for k in valid)),
                     f"{len(only)} ({loose})", str(len(invalid)),
                     str(sum(not theirs[k][3] for k in invalid)),
                     str(sum(not mine[k][3] for k in invalid))])
    b, o = base_path.rsplit("/", 1)[-1], other_path.rsplit("/", 1)[-1]
    header = (f"Oracle: the installed python-jsonschema and format checkers ({relabelled} "
              f"instances labelled otherwise than in {o}).\n\n")
    return header + table(["category", "valid (paired)", f"accepted: {b}", f"accepted: {o}",
                           f"accepted only by {b} (of them where {b} is loose)",
                           "invalid (paired)",
                           f"rejected: {b}", f"rejected: {o}"], rows)


def pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.1f}%)" if b else "0/0"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", choices=["auto", "xgrammar", "llguidance"])
    parser.add_argument("--set", action="append", dest="sets")
    parser.add_argument("--limit", type=int, default=None, help="schemas per category")
    parser.add_argument("--category", action="append", dest="categories",
                        help="only these categories (file stems), any set; repeatable")
    parser.add_argument("--timeout", type=float, default=60.0, help="compile_timeout_s")
    parser.add_argument("--property-order", choices=["schema", "any"], default="schema",
                        help="GrammarCompiler property_order (grammars.backends.llguidance.object_rules)")
    parser.add_argument("--output", default=str(RESULTS_DIR / "schema_coverage.md"))
    parser.add_argument("--compare", nargs=2, metavar=("BASE_JSON", "OTHER_JSON"),
                        help="only print the paired per-category table of two runs' .json")
    parser.add_argument("--disk-cache", action="store_true",
                        help="only time compile vs load from the on-disk grammar cache")
    args = parser.parse_args(argv)
    if args.compare:
        print(paired(*args.compare))
        return 0
    backends = args.backend or ["auto"]
    sets = args.sets or ["jsonschemabench", "maskbench_heldout"]
    from transformers import AutoTokenizer

    from grammars import GrammarCompiler

    tokenizer = AutoTokenizer.from_pretrained(str(SHARED / "tokenizers" / "qwen2.5"))
    data = {name: load_set(name, args.limit, args.categories) for name in sets}
    if args.disk_cache:
        text = ("# Compiled-grammar disk cache: compile vs load\n\n"
                f"Sets {', '.join(sets)}, --limit {args.limit}; Qwen2.5 tokenizer.\n\n"
                + disk_cache_timing(tokenizer, backends, data, args.timeout) + "\n")
        pathlib.Path(args.output).write_text(text)
        print(text)
        return 0
    results: dict[str, Any] = {}
    stats: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    started = time.perf_counter()
    for backend in backends:
        compiler = GrammarCompiler(tokenizer, backend=backend, vocab_size=151_936,  # type: ignore[arg-type]
                                   cache_bytes=1 << 30, compile_timeout_s=args.timeout,
                                   property_order=args.property_order)
        for set_name, categories in data.items():
            for category, records in categories.items():
                res = measure(compiler, records, stats if backend == backends[0] else
                              collections.defaultdict(collections.Counter))
                results[f"{backend}|{set_name}|{category}"] = res
                print(f"{backend} {set_name}/{category}: {res['compiled']}/{res['schemas']} "
                      f"{time.perf_counter() - started:.0f}s", file=sys.stderr)
    rows = []
    for key, res in results.items():
        backend, set_name, category = key.split("|")
        times = res["times"]
        rows.append([backend, f"{set_name}/{category}", pct(res["compiled"], res["schemas"]),
                     f"{1000 * percentile(times, 0.5):.1f} / {1000 * percentile(times, 0.99):.1f}",
                     pct(*res["valid"]), pct(*res["invalid"]), str(len(res["loose"]))])
    totals = []
    for backend in backends:
        mine = [r for k, r in results.items() if k.startswith(backend + "|")]
        all_times = [t for r in mine for t in r["times"]]
        totals.append([backend, "all", pct(sum(r["compiled"] for r in mine), sum(r["schemas"] for r in mine)),
                       f"{1000 * percentile(all_times, 0.5):.1f} / {1000 * percentile(all_times, 0.99):.1f}",
                       pct(sum(r["valid"][0] for r in mine), sum(r["valid"][1] for r in mine)),
                       pct(sum(r["invalid"][0] for r in mine), sum(r["invalid"][1] for r in mine)),
                       str(sum(len(r["loose"]) for r in mine))])
    refusal_rows = []
    for key, res in results.items():
        for reason, count in res["refusals"].items():
            refusal_rows.append([key.replace("|", " "), str(count), reason.replace("|", "/")])
    refused = stats["refused_with"]
    valid_with = stats["valid_with"]
    common = [key for key in refused if refused[key] and valid_with[key] >= 20]
    kw_rows = [[key, str(refused[key]), str(valid_with[key]),
                f"{100 * refused[key] / valid_with[key]:.1f}%"]
               for key in sorted(common, key=lambda k: -refused[k] / valid_with[k])][:20]
    acc_rows = [[key, str(n)] for key, n in stats["accepted_invalid"].most_common(20)]
    elapsed = time.perf_counter() - started
    body = "\n\n".join([
        f"Backends {', '.join(backends)}; sets {', '.join(sets)}; compile_timeout_s "
        f"{args.timeout:g}; property_order {args.property_order}; Qwen2.5 tokenizer; "
        f"{elapsed:.0f} s. Compile ms p50 / p99 over the "
        "schemas that compile. Oracle: python-jsonschema with format checking.",
        table(["backend", "category", "compiles", "compile ms p50 / p99", "valid accepted",
               "invalid rejected", "loose schemas"], rows + totals),
        "Loose: the compiled grammar accepts one of LOOSE_PROBES that the oracle refuses "
        "(part of the schema left unconstrained).",
        f"Valid instances refused, by schema keyword ({backends[0]}; a keyword counts once per "
        "refused instance of a schema that uses it; keywords in >= 20 valid instances, "
        "highest refused share first):\n\n" + table(
            ["keyword", "valid refused", "valid instances", "refused share"], kw_rows),
        f"Invalid instances accepted, by the keyword they break ({backends[0]}):\n\n"
        + table(["keyword", "invalid accepted"], acc_rows),
        "Compile refusals:\n\n" + table(["backend set category", "schemas", "reason"],
                                        refusal_rows),
    ])
    text = "# Real-world JSON schemas\n\n" + body + "\n"
    out = pathlib.Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(
        {**{k: {**v, "times": [round(t, 5) for t in v["times"]]} for k, v in results.items()},
         "keyword_stats": {name: dict(counter) for name, counter in stats.items()}}))
    print(text)
    return 0




if __name__ == "__main__":
    raise SystemExit(main())
