"""Mask cost on the Qwen2.5 tokenizer; writes benchmarks/results/mask_cost.md.

    python -m benchmarks.micro.mask_cost [--quick] [--backend auto|xgrammar|llguidance|outlines ...]
        [--family json_schema|regex|sql|tools ...] [--clock wall|thread] [--warm] [--evict-mb N]

With several `--backend`s the families are measured for each, interleaved family by family
in one run, so their figures compare side by side (a ratio on one machine at one time).

For each grammar family (JSON schemas from JSONSchemaBench with a valid instance, regexes,
schema-aware SQL with Spider gold queries, tool calls from BFCL functions) the script walks
the tokens of a valid output and times, at every position:
- `fill_mask` (one row) — per-token fill latency, p50 / p99 / mean;
- `fill_masks` with the next K=4 tokens as drafts (K+1 rows, advance + exact rollback);
- schema-aware SQL also: the grammar's own fill (no scope layer), and a separate walk that
  fills each position before anything else did (the scope layer's per-signature tables
  cleared), the first-fill cost the timed walk's fills do not see;
- in a separate walk, the rows as the torch engine fills them at batch 1 (engine.torch_engine.decoder):
  each step the drafter fills one row per draft position straight into the verify bitmask
  (`fill_mask`, advancing through its drafts, then rolling back), then the verify
  (`fill_masks(filled_rows=)`: advancing through the drafts, filling the row after the
  last, rolling back), every draft accepted (drafts = the next K tokens of the output),
  then the bonus token. Reported per drafter row and per verify (one a step), as the
  gateway's `specgate_grammar_mask_fill_seconds{rows="draft"|"target"}` counts them; the
  same walk with the verify refilling all K+1 rows gives the mask time per token the
  drafter's rows save.
  Inside a SQL string literal the grammar's row is copied from the literal's first position
  (grammars.sql.mask.literal_rows: one language there), a fill of a new position, so it counts.
Published bars for comparison: llguidance avg 64 µs / p99 533 µs; XGrammar p50 9 µs.
`--warm` walks each output once untimed before timing it: the steady state of a schema the
server has already served (llguidance builds lexer states lazily, per compiled grammar, and
the gateway caches compiled grammars), where the default measures a cold grammar.
`--clock thread` times with the measuring thread's CPU time instead of wall time: on a loaded
machine a fill the scheduler pre-empts counts only the time it ran, so p99 stays comparable
(the default, wall time, is what a quiet machine's figures use).
`--evict-mb N` reads an N MB buffer before every timed fill (in the engine walk: before each
drafter row and before the first verify row of a step), as a model forward between two
fills does to the CPU caches: a forward streams the weights (GBs) through them, and the
fill after it finds its tables in memory, not cache. Take N above the last-level cache.
Without it every walk runs with warm caches, which serving never has (measured on Zen 4,
docs/json-schema.md "Mask cost").
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import DATA, RESULTS_DIR, SHARED, percentile, write_report

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RESULTS = RESULTS_DIR / "mask_cost.md"
K = 4



def json_cases(limit: int) -> list[tuple[dict[str, Any], str]]:
    import jsonschema

    cases = []
    for name in ("Glaiveai2K", "Github_easy", "Github_medium", "Kubernetes"):
        taken = 0
        for line in (DATA / "jsonschemabench" / f"{name}.jsonl").read_text().splitlines():
            record = json.loads(line)
            valid = [t["data"] for t in record.get("tests", [])
                     if _is_valid(jsonschema, record["schema"], t["data"])]
            if valid:
                cases.append(({"guided_json": record["schema"]}, json.dumps(valid[0])))
                taken += 1
            if taken == limit:
                break
    return cases


def _is_valid(jsonschema: Any, schema: Any, data: Any) -> bool:
    try:
        return bool(jsonschema.validators.validator_for(schema)(schema).is_valid(data))
    except Exception:
        return False


def regex_cases() -> list[tuple[dict[str, Any], str]]:
    return [
        ({"guided_regex": r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z"}, "2025-01-31T12:34:56Z"),
        ({"guided_regex": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[a-z]{2,6}"},
         "grace.hopper@navy.example.com"),
        ({"guided_regex": r"(\+\d{1,3} )?\(\d{3}\) \d{3}-\d{4}"}, "+1 (555) 867-5309"),
        ({"guided_regex": r"[A-Z][a-z]+( [A-Z][a-z]+)*, [0-9]{1,3} years"},
         "Ada Lovelace, 36 years"),
        ({"guided_choice": ["positive", "negative", "neutral"]}, "negative"),
    ]


def sql_cases(limit: int) -> list[tuple[dict[str, Any], str]]:
    base = DATA / "text2sql" / "spider"
    examples = json.loads((base / "dev.json").read_text())[:: max(1, 377 // limit)][:limit]
    return [({"response_format": {"type": "sql", "sql": {
        "schema": (base / "ddl" / f"{e['db_id']}.sql").read_text()}}}, e["query"])
        for e in examples]


_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array",
               "integer": "integer", "string": "string", "boolean": "boolean", "array": "array"}


def _bfcl_schema(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _bfcl_schema(v) for k, v in node.items() if k not in ("optional",)}
        if "type" in out:
            mapped = _BFCL_TYPES.get(out["type"])
            if mapped is None:
                out.pop("type")
            else:
                out["type"] = mapped
        return out
    if isinstance(node, list):
        return [_bfcl_schema(v) for v in node]
    return node


def tool_cases(limit: int) -> list[tuple[dict[str, Any], str]]:
    questions = [json.loads(line) for line in
                 (DATA / "bfcl/BFCL_v4_simple_python.json").read_text().splitlines()]
    answers = {json.loads(line)["id"]: json.loads(line) for line in
               (DATA / "bfcl/possible_answer/BFCL_v4_simple_python.json").read_text().splitlines()}
    cases = []
    for question in questions:
        function = question["function"][0]
        truth = answers[question["id"]]["ground_truth"][0]
        name = next(iter(truth))
        arguments = {key: values[0] for key, values in truth[name].items()
                     if values and values[0] != ""}
        tool = {"type": "function", "function": {
            "name": function["name"], "parameters": _bfcl_schema(function["parameters"])}}
        call = json.dumps({"name": function["name"], "arguments": arguments})
        cases.append(({"tools": [tool], "tool_choice": "required"},
                      f"<tool_call>\n{call}\n</tool_call>"))
        if len(cases) == limit:
            break
    return cases


class Evictor:
    """Reads a buffer of `megabytes` before a timed fill (nothing when 0): the caches as a
    model forward leaves them."""

    def __init__(self, megabytes: int) -> None:
        import numpy as np

        self._buffer = np.ones(megabytes << 17) if megabytes > 0 else None  # float64: 8 bytes each

    def __call__(self) -> None:
        if self._buffer is not None:
            self._buffer.sum()


def engine_walk(matcher: Any, tokens: list[int], bitmask: Any, *, clock: Callable[[], int],
                evict: Evictor, drafter_rows: bool = True) -> tuple[list[float], list[float]]:
    """Times (ns) of the drafter's rows and of each step's verify (`fill_masks`), filled as
    the torch engine does at batch 1 with every draft accepted (see the module docstring).
    `drafter_rows=False`: the verify refills all K+1 rows instead of the row after the last
    draft."""
    draft_ns: list[float] = []
    verify_ns: list[float] = []
    index = 0
    while index < len(tokens):
        drafts = tokens[index : index + K]
        for row, token in enumerate(drafts):  # the drafter: a forward, then its row, then the next draft
            evict()
            start = clock()
            matcher.fill_mask(bitmask, row)
            draft_ns.append(clock() - start)
            matcher.accept_token(token)
        matcher.rollback(len(drafts))
        evict()  # the target's forward, then the verify
        start = clock()
        matcher.fill_masks(bitmask, drafts, filled_rows=len(drafts) if drafter_rows else 0)
        verify_ns.append(clock() - start)
        for token in drafts:  # every draft accepted: the commit advances through them
            matcher.accept_token(token)
        index += len(drafts)
        if index < len(tokens):  # the bonus token, sampled from the last verify row
            matcher.accept_token(tokens[index])
            index += 1
    return draft_ns, verify_ns


def measure(compiler: Any, cases: list[tuple[dict[str, Any], str]], *,
            clock: Callable[[], int] = time.perf_counter_ns, warm: bool = False,
            evict: Evictor | None = None) -> dict[str, Any]:
    """Fill times at every position of each case's valid output. `warm`: each grammar first
    walks the same output once, untimed, so what a backend builds lazily per compiled grammar
    (llguidance's lexer states) exists before timing: the steady state of a schema the
    server has already served (on Zen 3 it read no lower than cold). `evict`: run
    before each timed fill."""
    from grammars import GrammarError, spec_from_request

    evict = evict or Evictor(0)

    fill_ns: list[float] = []
    multi_ns: list[float] = []
    inner_ns: list[float] = []  # schema-aware SQL: the grammar's own fill, without the scope layer
    cold_ns: list[float] = []  # schema-aware SQL: fill only, the scope layer's tables cleared first
    draft_ns: list[float] = []  # the engine walk: the drafter's rows
    verify_ns: list[float] = []  # the engine walk: each step's verify
    engine_ns = {True: 0.0, False: 0.0}  # the engine walk's mask time, with / without the drafter's rows
    engine_tokens = 0
    skipped = 0
    bitmask = compiler.allocate_bitmask(K + 1)
    for case_index, (body, text) in enumerate(cases):
        try:
            compiled = compiler.compile(spec_from_request(body))
        except GrammarError:
            skipped += 1
            continue
        tokens = compiler.encode(text)
        matcher = compiled.matcher()
        if matcher.validate(tokens) != len(tokens):
            skipped += 1
            continue
        if warm:
            for index, token in enumerate(tokens):
                matcher.fill_mask(bitmask, 0)
                matcher.fill_masks(bitmask, tokens[index : index + K])
                matcher.accept_token(token)
            matcher = compiled.matcher()
        inner = getattr(matcher, "inner", None)
        if inner is not None and not warm:
            # the scope layer keeps verdicts per signature, and fill_masks at one position
            # fills the next ones: the timed walk's fills find tables made by the previous
            # position's fill_masks. This walk fills each position first, from no tables.
            matcher.forget()
            for token in tokens:
                evict()
                start = clock()
                matcher.fill_mask(bitmask, 0)
                cold_ns.append(clock() - start)
                matcher.accept_token(token)
            matcher = compiled.matcher()
            matcher.forget()
        for index, token in enumerate(tokens):
            # with a scope layer its grammar's own fill is timed at the same position, first at
            # even positions and second at odd ones (the second fill of a state finds it cached)
            for scoped in (False, True) if index % 2 == 0 else (True, False):
                if not scoped and inner is None:
                    continue
                evict()
                start = clock()
                target = matcher if scoped else inner
                assert target is not None
                target.fill_mask(bitmask, 0)
                (fill_ns if scoped else inner_ns).append(clock() - start)
            drafts = tokens[index : index + K]
            evict()
            start = clock()
            matcher.fill_masks(bitmask, drafts)
            multi_ns.append(clock() - start)
            matcher.accept_token(token)
        # the engine walk, with the drafter's rows in the verify mask and with the verify
        # refilling every row (alternating which goes first), each on a fresh grammar: no
        # lexer states, no scope tables
        for direct in (True, False) if case_index % 2 == 0 else (False, True):
            if not warm:
                compiler.clear_cache()
                compiled = compiler.compile(compiled.spec)
            drafted, verified = engine_walk(compiled.matcher(), tokens, bitmask, clock=clock, evict=evict,
                                            drafter_rows=direct)
            engine_ns[direct] += sum(drafted) + sum(verified)
            if direct:
                draft_ns += drafted
                verify_ns += verified
        engine_tokens += len(tokens)
    return {"cases": len(cases) - skipped, "skipped": skipped, "fill": fill_ns,
            "multi": multi_ns, "inner": inner_ns, "cold": cold_ns, "draft": draft_ns,
            "verify": verify_ns, "engine_tokens": engine_tokens,
            "engine_ns_direct": engine_ns[True], "engine_ns_refill": engine_ns[False]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--backend", action="append",
                        choices=["auto", "xgrammar", "llguidance", "outlines"])
    parser.add_argument("--output", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--family", action="append", choices=["json_schema", "regex", "sql", "tools"],
                        help="measure only these families (default: all)")
    parser.add_argument("--clock", choices=["wall", "thread"], default="wall",
                        help="wall time (default) or the measuring thread's CPU time")
    parser.add_argument("--property-order", choices=["schema", "any"], default="schema",
                        help="GrammarCompiler property_order (grammars.backends.llguidance.object_rules)")
    parser.add_argument("--json-whitespace", action="append", choices=["conventional", "flexible"],
                        help="GrammarCompiler json_whitespace (grammars.json.layout); several: "
                        "each backend once per layout, side by side (default: conventional)")
    parser.add_argument("--warm", action="store_true",
                        help="walk each output once untimed first (a schema already served)")
    parser.add_argument("--evict-mb", type=int, default=0, metavar="N",
                        help="read an N MB buffer before every timed fill, as a forward does to the caches")
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from grammars import GrammarCompiler

    tokenizer = AutoTokenizer.from_pretrained(str(SHARED / "tokenizers" / "qwen2.5"))
    backends = args.backend or ["xgrammar"]
    layouts = args.json_whitespace or ["conventional"]
    compilers = {name if len(layouts) == 1 else f"{name} ({layout})": GrammarCompiler(
                     tokenizer, backend=name, vocab_size=151_936,  # type: ignore[arg-type]
                     cache_bytes=1 << 30, compile_timeout_s=60.0,
                     property_order=args.property_order, json_whitespace=layout)
                 for name in backends for layout in layouts}
    limit = 5 if args.quick else 40
    clock = time.thread_time_ns if args.clock == "thread" else time.perf_counter_ns
    evict = Evictor(args.evict_mb)
    families = {"JSON schema (JSONSchemaBench)": ("json_schema", json_cases(limit)),
                "regex / choice": ("regex", regex_cases()),
                "SQL, schema-aware (Spider)": ("sql", sql_cases(limit)),
                "tool call (BFCL, required)": ("tools", tool_cases(limit))}
    rows = []
    per_token = []  # the engine walk's mask time per output token, with / without the drafter's rows
    for family, (kind, cases) in families.items():
        if args.family and kind not in args.family:
            continue
        for name, compiler in compilers.items():
            if kind not in compiler.supported_kinds:
                continue
            stats = measure(compiler, cases, clock=clock, warm=args.warm, evict=evict)
            fill, multi = stats["fill"], stats["multi"]
            rows.append(
                f"| {family} | {name} | {stats['cases']} | {len(fill)} | "
                f"{percentile(fill, 0.5) / 1e3:.1f} | {percentile(fill, 0.99) / 1e3:.1f} | "
                f"{sum(fill) / len(fill) / 1e3:.1f} | {percentile(multi, 0.5) / 1e3:.1f} | "
                f"{percentile(multi, 0.99) / 1e3:.1f} |"
            )
            if stats["inner"]:
                inner = stats["inner"]
                rows.append(
                    f"| {family}, grammar only (no scope layer) | {name} | {stats['cases']} | "
                    f"{len(inner)} | {percentile(inner, 0.5) / 1e3:.1f} | "
                    f"{percentile(inner, 0.99) / 1e3:.1f} | {sum(inner) / len(inner) / 1e3:.1f} | — | — |")
            if stats["cold"]:
                cold = stats["cold"]
                rows.append(
                    f"| {family}, each position filled first (scope tables cleared, no fill_masks) | "
                    f"{name} | {stats['cases']} | {len(cold)} | {percentile(cold, 0.5) / 1e3:.1f} | "
                    f"{percentile(cold, 0.99) / 1e3:.1f} | {sum(cold) / len(cold) / 1e3:.1f} | — | — |")
            if stats["engine_tokens"]:
                direct, refill = (stats[f"engine_ns_{way}"] / stats["engine_tokens"] / 1e3
                                  for way in ("direct", "refill"))
                per_token.append(f"- {family}, {name}: {direct:.1f} µs with the drafter's rows in the "
                                 f"verify mask, {refill:.1f} µs with the verify refilling every row "
                                 f"({direct / refill:.2f}x)")
            for rows_name, times in (("drafter rows", stats["draft"]),
                                     ("verify (one a step: the row after the last draft)", stats["verify"])):
                rows.append(
                    f"| {family}, as the engine fills: {rows_name} | {name} | {stats['cases']} | "
                    f"{len(times)} | {percentile(times, 0.5) / 1e3:.1f} | "
                    f"{percentile(times, 0.99) / 1e3:.1f} | {sum(times) / len(times) / 1e3:.1f} | — | — |")
    text = "\n".join([
        "# Mask cost",
        "",
        f"Backends {', '.join(backends)}, Qwen2.5 tokenizer (151,936-wide rows), CPU, one "
        "thread per matcher; `python -m benchmarks.micro.mask_cost"
        f"{' --quick' if args.quick else ''}{''.join(' --backend ' + b for b in backends)}"
        f"{''.join(' --family ' + f for f in args.family or [])}"
        f"{' --clock thread' if args.clock == 'thread' else ''}{' --warm' if args.warm else ''}"
        f"{' --property-order any' if args.property_order == 'any' else ''}"
        f"{f' --evict-mb {args.evict_mb}' if args.evict_mb else ''}`. "
        f"Times in µs ({'thread CPU time' if args.clock == 'thread' else 'wall time'}), "
        "measured at every token position of a valid output"
        f"{' after one untimed walk of it (warm grammar)' if args.warm else ' (cold: first walk of a freshly compiled grammar)'}"
        f"{f', a {args.evict_mb} MB buffer read before every timed fill (caches as a forward leaves them)' if args.evict_mb else ', caches warm'}.",
        "",
        "| grammar | backend | grammars | positions | fill p50 | fill p99 | fill mean | "
        f"fill_masks K={K} p50 | fill_masks K={K} p99 |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Published bars: llguidance avg 64 µs / p99 533 µs per mask; XGrammar p50 9 µs.",
        "`fill_masks` fills K+1 rows, advancing through the drafts and rolling back exactly.",
        "Schema-aware SQL masks include the identifier-scope layer (grammars.sql.mask.matcher); "
        "its `grammar only` row is the grammar's own fill at the same positions, timed "
        "interleaved with the scoped fill (first at even positions, second at odd ones). The layer keeps its verdicts per scope signature, "
        "so a fill right after the previous position's `fill_masks` (which filled this "
        "position's row) finds them made; the `each position filled first` row walks the "
        "output once beforehand with no tables and fill only: the cost of a signature's first "
        "fill.",
        f"`as the engine fills`: a separate walk on a freshly compiled grammar, rows filled as the "
        f"torch engine fills them at batch 1 with K={K} and every draft accepted: the drafter's "
        "row at each draft position, written into the verify mask, then the verify, which "
        "advances through the drafts and fills the row after the last one; the gateway's "
        "`specgate_grammar_mask_fill_seconds{rows=\"draft\"|\"target\"}` in serving. Inside a "
        "SQL literal the grammar's row is the literal's first one (grammars.sql.mask.literal_rows).",
        "",
        "Mask time per output token as the engine fills (drafter rows and verifies, the same "
        "walk twice per grammar, on a fresh grammar each time, alternating which goes first):",
        "",
        *per_token,
        "",
        "JSON whitespace is bounded by xgrammar's `{0,16}` repetition (max_whitespace); with "
        "xgrammar's unbounded default the JSON fill p50 is ~4x lower (measured 66 -> 14 µs on "
        "16 schemas); the specgate wrapper adds ~2 µs per fill. `auto` compiles JSON schemas "
        "with llguidance (whitespace capped by WhitespaceCap) and the rest with xgrammar.",
        "",
    ])
    write_report(text, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
