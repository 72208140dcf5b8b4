"""Mask fill times as a running gateway measures them: send constrained requests, read /metrics.

    python -m benchmarks.micro.served_mask_fills [--url http://127.0.0.1:8000] [--sql N] [--json N]
        [--db SPIDER_DB] [--output FILE]

Sends N Spider dev questions with their database's DDL as a schema-aware SQL constraint
(`response_format: {"type": "sql", ...}`; every 377/N-th question, so mostly different
databases: each a freshly compiled grammar; or with `--db`, the first N questions on one
database: one grammar whose scope tables warm up, a Text2SQL service over a fixed database)
and N JSON-schema requests (one strict schema),
greedy, with the official OpenAI client, then reads the server's
`specgate_grammar_mask_fill_seconds{grammar, backend, rows}` histogram (gateway.metrics) and
prints, per grammar family and rows (the drafter's, the verify's: the drafter writes the verify
rows at its positions, so the verify fills at most the row after the last draft), the fills,
their mean and the share at or under each bound from 100 µs to 5 ms; and the garbage
collector's pauses since the server started (`specgate_gc_pause_seconds`, timed from the end of startup, per generation:
count, total, and how many took over 10 and 100 ms), which stop every fill and forward. Those are the costs of
masks filled between real forwards, on the CPU serving (benchmarks.micro.mask_cost's
`--evict-mb` reproduces the cache state offline). Start the server first
(`bash scripts/serve.sh`); its histogram counts every request it has finished, so use a
fresh one.

Knows nothing of the engine; talks HTTP only.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time
from typing import Any

from benchmarks.common import DATA, RESULTS_DIR, write_report

RESULTS = RESULTS_DIR / "served_mask_fills.md"
_METRIC = "specgate_grammar_mask_fill_seconds"
_SHOWN = ("0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005")
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "country", "age"],
          "properties": {"name": {"type": "string", "maxLength": 40}, "country": {"type": "string"},
                         "age": {"type": "integer", "minimum": 0}}}


def send(url: str, *, sql: int, json_requests: int, db: str | None = None) -> list[str]:
    """Send the requests; return one line per answer (finish reason, tokens, text)."""
    from openai import OpenAI

    client = OpenAI(base_url=f"{url}/v1", api_key="none", timeout=900)
    model = client.models.list().data[0].id
    spider = DATA / "text2sql" / "spider"
    dev = json.loads((spider / "dev.json").read_text())
    if db is not None:
        dev = [example for example in dev if example["db_id"] == db]
        if len(dev) < sql:
            raise SystemExit(f"Spider dev has {len(dev)} questions on {db!r}, fewer than --sql {sql}")
    lines = []
    for example in (dev[:sql] if db is not None else dev[:: max(1, len(dev) // max(sql, 1))][:sql]):
        ddl = (spider / "ddl" / f"{example['db_id']}.sql").read_text()
        reply = client.chat.completions.create(
            model=model, temperature=0, max_tokens=120,
            messages=[{"role": "system", "content": "Write one SQLite query. Schema:\n" + ddl},
                      {"role": "user", "content": example["question"]}],
            extra_body={"response_format": {"type": "sql", "sql": {"dialect": "sqlite", "schema": ddl}}})
        lines.append(_line("sql", reply))
    for index in range(json_requests):
        reply = client.chat.completions.create(
            model=model, temperature=0, max_tokens=80,
            messages=[{"role": "user", "content": f"Describe famous person number {index + 1}."}],
            response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON,
                                                                    "strict": True}})
        lines.append(_line("json", reply))
    return lines


def _line(kind: str, reply: Any) -> str:
    choice = reply.choices[0]
    return f"{kind}: {choice.finish_reason}, {reply.usage.completion_tokens} tokens: {choice.message.content!r}"[:160]


def read_metrics(url: str) -> tuple[dict[tuple[str, ...], dict[str, float]], str,
                                     dict[str, dict[str, float]]]:
    """The served histogram per (grammar, backend, rows) (cumulative counts by `le`, `count`,
    `sum`), the serving CPU as the server reports it (`specgate_cost_model_info`), and the
    GC pause histogram per generation (same keys)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    families = {family.name: family for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)}
    info = families.get("specgate_cost_model_info")
    labels = info.samples[0].labels if info is not None and info.samples else None
    cpu = f"{labels.get('cpu', '?')}, flags {labels.get('flags', '?')}" if labels else "CPU not reported"
    fills = _histograms(families.get(_METRIC), ("grammar", "backend", "rows"))
    pauses = _histograms(families.get("specgate_gc_pause_seconds"), ("generation",))
    return fills, cpu, {key[0]: sample for key, sample in pauses.items()}


def _histograms(family: Any, label_names: tuple[str, ...]) -> dict[tuple[str, ...], dict[str, float]]:
    """A histogram family's samples per label values: cumulative counts by `le`, `count`, `sum`."""
    out: dict[tuple[str, ...], dict[str, float]] = {}
    for sample in family.samples if family is not None else ():
        key = sample.labels.get("le") or sample.name.rsplit("_", 1)[-1]
        out.setdefault(tuple(sample.labels[name] for name in label_names), {})[key] = sample.value
    return out


def pause_table(pauses: dict[str, dict[str, float]]) -> list[str]:
    rows = ["| GC generation | pauses | total ms | over 10 ms | over 100 ms |", "|---|---|---|---|---|"]
    for generation, sample in sorted(pauses.items()):
        count = sample.get("count", 0.0)
        rows.append(f"| {generation} | {count:.0f} | {sample.get('sum', 0.0) * 1e3:.0f} | "
                    f"{count - sample.get('0.01', count):.0f} | {count - sample.get('0.1', count):.0f} |")
    return rows


def table(histogram: dict[tuple[str, ...], dict[str, float]]) -> list[str]:
    head = "| grammar | backend | rows | fills | mean µs | " + " | ".join(
        f"≤ {float(bound) * 1e6:g} µs" for bound in _SHOWN) + " |"
    rows = [head, "|" + "---|" * (5 + len(_SHOWN))]
    for (grammar, backend, kind), sample in sorted(histogram.items()):
        count = sample.get("count", 0.0)
        if not count:
            continue
        shares = " | ".join(f"{sample.get(bound, 0.0) / count:.1%}" for bound in _SHOWN)
        rows.append(f"| {grammar} | {backend} | {kind} | {count:.0f} | "
                    f"{sample.get('sum', 0.0) / count * 1e6:.0f} | {shares} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--sql", type=int, default=12, help="schema-aware SQL requests")
    parser.add_argument("--json", type=int, default=3, help="JSON-schema requests")
    parser.add_argument("--db", help="ask only about this Spider database (e.g. car_1)")
    parser.add_argument("--output", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    answers = send(args.url, sql=args.sql, json_requests=args.json, db=args.db)
    wall = time.perf_counter() - started
    histogram, cpu, pauses = read_metrics(args.url)
    text = "\n".join([
        "# Mask fills as served",
        "",
        f"`python -m benchmarks.micro.served_mask_fills --sql {args.sql} --json {args.json}"
        f"{f' --db {args.db}' if args.db else ''}` against a "
        f"gateway at {args.url} (serving CPU: {cpu}), {len(answers)} requests in {wall:.0f} s, "
        f"greedy. From the server's `{_METRIC}` histogram: share of mask rows filled within "
        f"each bound (`target`: the verify rows the drafter did not write).",
        "",
        *table(histogram),
        "",
        "Garbage collector pauses while serving (from the end of startup):",
        "",
        *pause_table(pauses),
        "",
        "Answers:",
        "",
        *(f"- {line}" for line in answers),
        "",
    ])
    write_report(text, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
