"""BFCL evaluation of tool calling through the HTTP server, with and without speculation.

    python -m benchmarks.bfcl_eval [--per-category 6] [--seed 0] [--categories ...]
        [--configs omitted required free] [--servers spec no-spec] [--max-tokens 160]
        [--max-prompt-chars 12000] [--cpus 0] [--out benchmarks/results/bfcl_eval] [--resume]

Questions: a seeded sample of `--per-category` single-turn questions from each BFCL
category in ../shared/data/bfcl (benchmarks.suite.bfcl_data), functions converted to OpenAI
tools (benchmarks.suite.bfcl). Each question is sent with the real OpenAI client, T=0, to
`specgate serve` processes started here (benchmarks.suite.served), one per server config:
- `spec`: `specgate serve --adaptive-k false` (Qwen2.5-Coder 1.5B target, 0.5B masked draft
  model, K=4 at every step, the kernels `--kernels auto` picks): speculation itself, whatever
  the forward costs cached on the machine would make adaptive K choose;
- `no-spec`: the same with `--drafter none` (no speculation);
both plus `--server-flags`.
Request configs (same prompt: the chat template with the tools):
- `omitted`: `tool_choice` not sent (the server's default, "auto");
- `required`: `tool_choice: "required"`;
- `free`: what a server without grammars gives: `tool_choice: "none"` (the tools are still in
  the prompt, no grammar constrains the output), the returned text parsed HERE, client-side,
  by the parser the gateway applies to its own output (`grammars.parse_tool_calls`;
  benchmarks never import the gateway). That the prompt is the same is checked (`prompt_tokens` equal to
  `omitted`'s) and reported.
Before each measured request an unrecorded one with `max_tokens: WARM_TOKENS` and the same
body puts the prompt in the server's prefix caches (the target's, and the draft's: a draft
prefills the prompt at its first drafting step, so one token would warm the target alone and
charge the draft's prefill to whichever config is measured first) and its grammar in the
compile cache, so every measured request finds them warm (each server, each config alike). The servers run side by
side, alternating which goes first per question.
Per category, server and config: accuracy (BFCL's AST check, benchmarks.suite.bfcl_check),
call rate (questions answered with at least one call), calls with invalid arguments (not a
JSON object, not valid under the tool's parameters schema, or an unknown function), HTTP
4xx / 5xx, end-to-end tokens/s (completion tokens / request latency, summed), acceptance
(accepted / proposed draft tokens, from `usage.speculative`), and spec/no-spec speed-ups and
output agreement (T=0: the outputs should be identical; differences come from floating-point
near-ties). Questions are taken round-robin over the categories. Each record is appended to
`<out>.records.tmp` (JSON lines) as it completes; `--resume` keeps the records found there and asks only
what is missing (a long run survives an interruption). At the end: `<out>.json` (every
request) and `<out>.md` (tables, CPU, flags, date).
Talks to the gateway only over HTTP.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import platform
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.common import DATA, RESULTS_DIR, write_json, write_report
from benchmarks.suite.bfcl_check import check_answer
from benchmarks.suite.bfcl_data import CATEGORIES, Question, load_questions

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

API_KEY = "bfcl-eval"
CONFIGS = ("omitted", "required", "free")
WARM_TOKENS = 4  # past the prefill step, so a speculating server drafts (and prefills its draft) once
SERVERS = {"spec": ["--adaptive-k", "false"], "no-spec": ["--drafter", "none"]}


@dataclass
class Record:
    id: str
    category: str
    server: str
    config: str
    status: int = 200
    error: str = ""
    latency_s: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    proposed_tokens: int = 0
    accepted_tokens: int = 0
    finish_reason: str = ""
    content: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)
    invalid_calls: int = 0
    ok: bool = False
    reason: str = ""


def parse_like_gateway(text: str, tools: list[dict[str, Any]]) -> tuple[str | None, list[tuple[str, str]]]:
    """(content, [(name, arguments JSON)]) by the gateway's tool-call parser
    (`grammars.parse_tool_calls`, which the chat route applies to its own output)."""
    from grammars import parse_tool_calls

    content, calls = parse_tool_calls(text, [tool["function"]["name"] for tool in tools])
    return content, [(call.name, call.arguments) for call in calls]


def invalid_calls(calls: list[tuple[str, str]], tools: list[dict[str, Any]]) -> int:
    """Calls whose arguments are not a JSON object valid under the named tool's parameters."""
    import jsonschema

    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in tools}
    bad = 0
    for name, arguments in calls:
        try:
            value = json.loads(arguments)
            jsonschema.validate(value, schemas[name])
            bad += not isinstance(value, dict)
        except (ValueError, KeyError, jsonschema.ValidationError):
            bad += 1
    return bad


def _body(question: Question, config: str, max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": question.messages, "tools": question.tools, "temperature": 0,
                            "max_tokens": max_tokens}
    if config == "required":
        body["tool_choice"] = "required"
    elif config == "free":
        body["tool_choice"] = "none"
    return body


def ask(client: Any, model: str, question: Question, *, server: str, config: str, max_tokens: int) -> Record:
    import openai

    record = Record(question.id, question.category, server, config)
    body = _body(question, config, max_tokens)
    try:
        client.chat.completions.create(model=model, **{**body, "max_tokens": WARM_TOKENS})  # warm caches
        start = time.perf_counter()
        response = client.chat.completions.create(model=model, **body)
        record.latency_s = time.perf_counter() - start
    except openai.APIStatusError as exc:
        record.status, record.error = exc.status_code, str(exc)[:300]
        return record
    except openai.APIError as exc:  # connection lost, timeout: counted as a server failure
        record.status, record.error = 599, f"{type(exc).__name__}: {exc}"[:300]
        return record
    data = response.model_dump()
    usage = data.get("usage") or {}
    record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    record.cached_tokens = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    record.completion_tokens = int(usage.get("completion_tokens") or 0)
    speculative = usage.get("speculative") or {}
    record.proposed_tokens = int(speculative.get("proposed_tokens") or 0)
    record.accepted_tokens = int(speculative.get("accepted_tokens") or 0)
    choice = data["choices"][0]
    record.finish_reason = str(choice.get("finish_reason"))
    message = choice["message"]
    if config == "free":
        content, record.calls = parse_like_gateway(message.get("content") or "", question.tools)
    else:
        content = message.get("content")
        record.calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    record.content = (content or "")[:400]
    record.invalid_calls = invalid_calls(record.calls, question.tools)
    parsed: list[tuple[str, Any]] = []
    for name, arguments in record.calls:
        try:
            parsed.append((name, json.loads(arguments)))
        except ValueError:
            parsed.append((name, None))  # the checker rejects arguments that are not an object
    verdict = check_answer(question.category, question.functions, parsed, question.possible)
    record.ok, record.reason = verdict.ok, verdict.reason
    return record


# --- aggregation ----------------------------------------------------------------------------

def _rate(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def summarise(records: list[Record]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for record in records:
        groups[(record.category, record.server, record.config)].append(record)
        groups[("all", record.server, record.config)].append(record)
        if "irrelevance" not in record.category:
            groups[("needs a call", record.server, record.config)].append(record)
    rows = []
    for (category, server, config), group in groups.items():
        answered = [r for r in group if r.status == 200]
        rows.append({
            "category": category, "server": server, "config": config, "questions": len(group),
            "accuracy": _rate(sum(r.ok for r in group), len(group)),
            "call_rate": _rate(sum(bool(r.calls) for r in answered), len(group)),
            "invalid_calls": sum(r.invalid_calls for r in answered),
            "calls": sum(len(r.calls) for r in answered),
            "http_4xx": sum(400 <= r.status < 500 for r in group),
            "http_5xx": sum(r.status >= 500 for r in group),
            "tokens": sum(r.completion_tokens for r in answered),
            "tokens_per_s": _rate(sum(r.completion_tokens for r in answered), sum(r.latency_s for r in answered)),
            "acceptance": _rate(sum(r.accepted_tokens for r in answered), sum(r.proposed_tokens for r in answered)),
            "cached_share": _rate(sum(r.cached_tokens for r in answered), sum(r.prompt_tokens for r in answered)),
        })
    return rows


def paired(records: list[Record]) -> list[dict[str, Any]]:
    """spec vs no-spec on the same question and config: speed-up of summed tokens/s, outputs equal."""
    by_key = {(r.id, r.config, r.server): r for r in records if r.status == 200}
    groups: dict[tuple[str, str], list[tuple[Record, Record]]] = defaultdict(list)
    for (qid, config, server), spec in by_key.items():
        plain = by_key.get((qid, config, "no-spec"))
        if server != "spec" or plain is None:
            continue
        groups[(spec.category, config)].append((spec, plain))
        groups[("all", config)].append((spec, plain))
        if "irrelevance" not in spec.category:
            groups[("needs a call", config)].append((spec, plain))
    out = []
    for (category, config), pairs in groups.items():
        spec_tps = _rate(sum(s.completion_tokens for s, _ in pairs), sum(s.latency_s for s, _ in pairs))
        plain_tps = _rate(sum(p.completion_tokens for _, p in pairs), sum(p.latency_s for _, p in pairs))
        out.append({"category": category, "config": config, "pairs": len(pairs),
                    "spec_tokens_per_s": spec_tps, "no_spec_tokens_per_s": plain_tps,
                    "speedup": _rate(spec_tps or 0.0, plain_tps or 0.0) if spec_tps and plain_tps else None,
                    "same_output": sum((s.content, s.calls) == (p.content, p.calls) for s, p in pairs)})
    return out


def _fmt(value: Any, pct: bool = False, digits: int = 2) -> str:
    if value is None:
        return "-"
    if pct:
        return f"{100 * value:.0f}%"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def report(document: dict[str, Any]) -> str:
    meta = document["meta"]
    lines = [
        "# BFCL tool calling through the server",
        "",
        f"- date: {meta['date']}; CPU: {meta['cpu']}; torch threads: {meta['torch_threads']}",
        f"- command: `{meta['command']}`",
        f"- questions: {meta['per_category']} per category (seed {meta['seed']}; prompts over "
        f"{meta['max_prompt_chars']} characters of messages + tools left out: {meta['left_out']}), "
        f"T=0, max_tokens {meta['max_tokens']} (x2 for parallel categories)",
        "- servers: " + "; ".join(f"`{name}`: `specgate serve {' '.join(flags)}`"
                                   for name, flags in meta["server_flags"].items()),
        f"- engine notes (spec server log): {meta['engine_notes'] or '-'}; servers pinned to cores: "
        f"{meta.get('cpus') or 'no'}",
        f"- `free`: prompt identical to `omitted` on {meta['free_same_prompt']}",
        "",
        "| category | server | config | n | accuracy | call rate | invalid args | 4xx/5xx | tok/s | acceptance |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = {c: i for i, c in enumerate([*CATEGORIES, "needs a call", "all"])}
    rows = sorted(document["summary"], key=lambda r: (order.get(r["category"], 99), r["server"], CONFIGS.index(r["config"])))
    for r in rows:
        lines.append(
            f"| {r['category']} | {r['server']} | {r['config']} | {r['questions']} | {_fmt(r['accuracy'], True)} | "
            f"{_fmt(r['call_rate'], True)} | {r['invalid_calls']}/{r['calls']} | {r['http_4xx']}/{r['http_5xx']} | "
            f"{_fmt(r['tokens_per_s'])} | {_fmt(r['acceptance'])} |")
    if document["paired"]:
        lines += ["", "Speculation vs none, same questions and config (end to end, prompt cached):", "",
                  "| category | config | pairs | spec tok/s | no-spec tok/s | speed-up | same output |",
                  "|---|---|---|---|---|---|---|"]
        for p in sorted(document["paired"], key=lambda r: (order.get(r["category"], 99), CONFIGS.index(r["config"]))):
            lines.append(f"| {p['category']} | {p['config']} | {p['pairs']} | {_fmt(p['spec_tokens_per_s'])} | "
                         f"{_fmt(p['no_spec_tokens_per_s'])} | {_fmt(p['speedup'])}x | {p['same_output']}/{p['pairs']} |")
    return "\n".join(lines) + "\n"


# --- main -----------------------------------------------------------------------------------

def _engine_notes(lines: list[str]) -> str:
    keep = [line.split(": ", 1)[-1] for line in lines if "kernels" in line or "dtype" in line]
    return "; ".join(dict.fromkeys(keep))[:600]


def _run(args: argparse.Namespace, questions: list[Question], flags: dict[str, list[str]],
         records: list[Record], done: set[tuple[str, str, str]], log_path: pathlib.Path) -> str:
    """Ask every missing (question, server, config); returns the spec server's engine notes."""
    import contextlib

    import openai

    from benchmarks.suite.served import serve

    with contextlib.ExitStack() as stack:
        servers = {name: stack.enter_context(serve(flags[name], api_key=API_KEY, cpus=args.cpus))
                   for name in args.servers}
        notes = _engine_notes(next(iter(servers.values())).log_lines())
        clients = {name: openai.OpenAI(base_url=s.v1, api_key=API_KEY, max_retries=0, timeout=1800)
                   for name, s in servers.items()}
        model = clients[args.servers[0]].models.list().data[0].id
        for i, question in enumerate(questions):
            max_tokens = args.max_tokens * (2 if "parallel" in question.category else 1)
            order = args.servers if i % 2 == 0 else args.servers[::-1]
            for server in order:
                for config in args.configs:
                    if (question.id, server, config) in done:
                        continue
                    record = ask(clients[server], model, question, server=server, config=config, max_tokens=max_tokens)
                    records.append(record)
                    with log_path.open("a") as sink:
                        sink.write(json.dumps(asdict(record)) + "\n")
                    print(f"[{i + 1}/{len(questions)}] {question.id} {server}/{config}: "
                          f"{'ok' if record.ok else 'wrong'} {record.status} {record.completion_tokens} tok "
                          f"{record.latency_s:.1f}s calls={[name for name, _ in record.calls]} "
                          f"{(record.reason or record.error)[:120]}", flush=True)
    return notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-category", type=int, default=6, help="questions per category (0 = all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--categories", nargs="+", default=list(CATEGORIES), choices=CATEGORIES)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--servers", nargs="+", default=list(SERVERS), choices=list(SERVERS))
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--max-prompt-chars", type=int, default=12000)
    parser.add_argument("--server-flags", default="", help="extra `specgate serve` flags for every server")
    parser.add_argument("--out", default=str(RESULTS_DIR / "bfcl_eval"))
    parser.add_argument("--cpus", default=None,
                        help="pin every server to these cores (taskset -c), e.g. 0: one thread per model")
    parser.add_argument("--report-only", action="store_true",
                        help="no requests: write the report from the records of an earlier (partial) run with --out")
    parser.add_argument("--resume", action="store_true", help="keep the records of an earlier run with --out")
    args = parser.parse_args(argv)

    from engine.pacing.hardware import cpu_info

    by_category: list[list[Question]] = []
    left_out: dict[str, int] = {}
    for category in args.categories:
        sample, left_out[category] = load_questions(category, data_dir=DATA, per_category=args.per_category,
                                                     seed=args.seed, max_prompt_chars=args.max_prompt_chars)
        by_category.append(sample)
    questions = [q for round_ in itertools.zip_longest(*by_category) for q in round_ if q is not None]
    extra = args.server_flags.split()
    flags = {name: [*SERVERS[name], *extra] for name in args.servers}
    log_path = pathlib.Path(args.out + ".records.tmp")  # git-ignored working file
    records: list[Record] = []
    if (args.resume or args.report_only) and log_path.exists():
        wanted = {(q.id, server, config) for q in questions for server in args.servers for config in args.configs}
        for line in log_path.read_text().splitlines():
            record = Record(**{**json.loads(line), "calls": [tuple(c) for c in json.loads(line)["calls"]]})
            if (record.id, record.server, record.config) in wanted:
                records.append(record)
    else:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text("")
    done = {(r.id, r.server, r.config) for r in records}
    notes_path = pathlib.Path(args.out + ".notes.tmp")
    if not args.report_only:
        notes_path.write_text(_run(args, questions, flags, records, done, log_path))
    notes = notes_path.read_text() if notes_path.exists() else ""
    omitted = {(r.id, r.server): r.prompt_tokens for r in records if r.config == "omitted" and r.status == 200}
    free = [r for r in records if r.config == "free" and r.status == 200 and (r.id, r.server) in omitted]
    import torch

    document = {
        "meta": {
            "date": time.strftime("%Y-%m-%d"), "cpu": cpu_info().describe(), "machine": platform.machine(),
            "torch_threads": torch.get_num_threads(),
            "command": "python -m benchmarks.bfcl_eval " + " ".join(argv if argv is not None else sys.argv[1:]),
            "per_category": args.per_category, "seed": args.seed, "max_tokens": args.max_tokens,
            "max_prompt_chars": args.max_prompt_chars, "left_out": left_out,
            "server_flags": flags, "engine_notes": notes, "cpus": args.cpus,
            "free_same_prompt": f"{sum(r.prompt_tokens == omitted[(r.id, r.server)] for r in free)}/{len(free)}",
        },
        "summary": summarise(records),
        "paired": paired(records),
        "records": [asdict(r) for r in records],
    }
    write_json(document, args.out + ".json")
    write_report(report(document), args.out + ".md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
