"""Writing the results: the JSON document and the markdown table the docs link.

JSON: `{"results": [row, ...], "sweeps": {"k": [row, ...], "temperature": [row, ...]},
"machine": {...}, "settings": {...}, "unavailable": {config: reason}}` where each row has
at least `workload, config, acceptance_rate, mean_accepted_length, tokens_per_second,
speedup, validity` (see benchmarks.suite.metrics for every field). Markdown: one table per
workload of the main results, then the "where the speed comes from" table. Knows nothing
about models.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
from typing import Any

from benchmarks.common import write_json

REQUIRED_FIELDS = ("workload", "config", "acceptance_rate", "mean_accepted_length", "tokens_per_second",
                   "speedup", "validity")


def machine_info() -> dict[str, Any]:
    import torch

    from engine.pacing.hardware import cpu_info

    return {
        "cpu": cpu_info().model, "cpu_flags": cpu_info().key_flags,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.cuda.is_available(),
    }


def _fmt(value: Any, spec: str = ".2f") -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def _vllm_scope(settings: dict[str, Any]) -> str:
    cases = settings.get("vllm_cases") or settings.get("num_cases")
    scope = ", ".join(settings.get("vllm_workloads") or settings.get("workloads") or [])
    passes = settings.get("vllm_repeats") or 1
    return f"vLLM rows: {cases} request(s) per workload on {scope}, {passes} pass(es) in each engine."


def _wall(document: dict[str, Any]) -> str:
    wall = document.get("wall_s")
    return f" Whole run: {wall / 60:.1f} min." if isinstance(wall, (int, float)) else ""


def markdown(document: dict[str, Any]) -> str:
    settings = document.get("settings", {})
    lines = [
        "# specgate bench",
        "",
        f"Target `{settings.get('target')}`, draft `{settings.get('draft')}`, {settings.get('dtype')}, "
        f"K={settings.get('k')}, T={settings.get('temperature')}, "
        f"draft window {settings.get('draft_window') if settings.get('draft_window') is not None else 'default'}, "
        f"{settings.get('num_cases')} requests per cell, "
        f"max_tokens={settings.get('max_tokens')}, machine: {document.get('machine', {}).get('cpu_count')} CPUs "
        f"(torch threads {document.get('machine', {}).get('torch_threads')}). Mode: "
        f"{'quick' if settings.get('quick') else 'full'}. " + _vllm_scope(settings) + _wall(document),
        "",
        *_costs_header(document),
        "tok/s: decode tokens per second (prefill step excluded; vLLM rows: first to last streamed token), "
        "(min–max) over passes where the cases ran more than once; speedup: over `no-spec` on the same "
        "workload, measured in this run (vLLM rows: over `vllm-no-spec`, vLLM's own plain speed); pred.: measured ÷ predicted by `sampler.expected_speedup` from "
        "the measured α, K, draft and verify costs; mask: verify-side mask share of step time (vLLM rows: the plugin's own host time ÷ the worker's step time).",
        "",
    ]
    rows = document.get("results", [])
    for workload in dict.fromkeys(row["workload"] for row in rows):
        lines += [
            f"## {workload}", "",
            "| config | accept | tok/step | tok/s | speedup | ÷pred. | valid | stopped | = no-spec | mask "
            "| forced | strays/step | p50 s | p99 s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in rows:
            if row["workload"] != workload:
                continue
            if row.get("tokens_per_second") is None and row.get("error"):
                error = str(row.get("error"))
                shown = "unavailable (see below)" if error.startswith("unavailable:") else error[:160]
                lines.append(f"| {row['config']} | {shown.replace('|', '/')} " + "| " * 12 + "|")
                continue
            lines.append(
                f"| {row['config']} | {_fmt(row.get('acceptance_rate'))} | {_fmt(row.get('mean_accepted_length'))} "
                f"| {_fmt(row.get('tokens_per_second'))}{'*' if row.get('timing') == 'e2e' else ''}{_range(row)} "
                f"| {_fmt(row.get('speedup'))} "
                f"| {_fmt(row.get('speedup_vs_predicted'))} | {_fmt(row.get('validity'))} | {_fmt(row.get('stopped'))} "
                f"| {_fmt(row.get('greedy_match'))} | {_fmt(_mask(row), '.3f')} | {_fmt(row.get('forced_share'))} "
                f"| {_fmt(row.get('stray_rate'), '.3f')} | {_fmt(row.get('latency_p50_s'), '.1f')} "
                f"| {_fmt(row.get('latency_p99_s'), '.1f')} |"
            )
        lines.append("")
    lines += _ttft_table(rows)
    lines += _sources_table(rows)
    lines += _regions_table(rows)
    lines += _noise_check(rows)
    if document.get("notes"):
        lines += [f"Note: {document['notes']}", ""]
    unavailable = document.get("unavailable") or {}
    if unavailable:
        lines += ["Unavailable configurations:", ""]
        lines += [f"- `{name}`: {reason}" for name, reason in unavailable.items()]
        lines.append("")
    lines += [
        "Columns: accept = accepted ÷ drafted (a refused draft cut before verification counts as drafted and "
        "rejected); tok/step = tokens per target forward; valid = share of requests that stopped before "
        "max_tokens with an output the independent oracle accepts (jsonschema / tool parameters / sqlite3; "
        "a cut-off output is invalid); stopped = share that ended before max_tokens; = no-spec = share of "
        "outputs identical to no-spec's on the same case (T=0; speculation is exact, so a miss is "
        "numerics, bf16 logits depending on how many positions one forward verifies, or a bug to look "
        "into); tok/s* = end to end, prefill included (vLLM rows; their speedup compares end-to-end "
        "tokens/s with no-spec's); forced = share of accepted drafts that were grammar-forced (free); strays/step = proposals an unmasked draft "
        "model cut or ended at a grammar-refused token, per step; errors show in place of a row.",
        "",
    ]
    for plot in document.get("plots", []):
        lines.append(f"![{pathlib.Path(plot).stem}]({pathlib.Path(plot).name})")
    return "\n".join(lines) + "\n"


def _range(row: dict[str, Any]) -> str:
    """" (min–max)" of decode tok/s across passes, when the row has more than one."""
    low, high = row.get("tps_min"), row.get("tps_max")
    return "" if low is None or high is None else f" ({low:.2f}–{high:.2f})"


def _mask(row: dict[str, Any]) -> Any:
    """Verify-side mask share (torch rows), or the vLLM plugin's share of the worker's step time."""
    return row.get("mask_share") if row.get("mask_share") is not None else row.get("plugin_share")


def _costs_header(document: dict[str, Any]) -> list[str]:
    """The machine and the forward costs the engine measured (engine.pacing.cost_model), as a header."""
    machine = document.get("machine", {})
    costs = machine.get("forward_costs")
    lines = [f"CPU: {machine.get('cpu', '?')}, flags {' '.join(machine.get('cpu_flags', []))}; "
             f"kernels {machine.get('kernels', 'torch')} (draft: {machine.get('draft_kernels', 'same')}), "
             f"dtype {machine.get('dtype', '?')}.", ""]
    if costs:
        from engine.pacing.cost_model import ForwardCosts

        lines += [f"- {line}" for line in ForwardCosts.from_dict(costs).describe()] + [""]
    return lines


def _ttft_table(rows: list[dict[str, Any]]) -> list[str]:
    chosen = [r for r in rows if r.get("ttft_p50_s") is not None]
    if not chosen:
        return []
    lines = ["## Time to first token and the cost model", "",
             "TTFT: request start to the first token (prompt, grammar compile, prefill). cost model: the speedup "
             "engine.pacing.cost_model predicts from the costs measured at start and the tokens and forwards each step "
             "had; measured ÷ cost model = 1 when the cost model is right.", "",
             "| workload | config | TTFT p50 s | TTFT p99 s | speedup | cost model | measured ÷ cost model |",
             "|---|---|---|---|---|---|---|"]
    for r in chosen:
        lines.append(f"| {r['workload']} | {r['config']} | {_fmt(r.get('ttft_p50_s'))} | {_fmt(r.get('ttft_p99_s'))} "
                     f"| {_fmt(r.get('speedup'))} | {_fmt(r.get('cost_predicted_speedup'))} "
                     f"| {_fmt(r.get('speedup_vs_cost_model'))} |")
    return lines + [""]


def _sources_table(rows: list[dict[str, Any]]) -> list[str]:
    """Tokens per target step split by where they came from, for the speculating torch rows."""
    chosen = [r for r in rows if r.get("steps") and r.get("accepted_tokens") is not None
              and r.get("forced_accepted_tokens") is not None and r.get("draft_tokens")]
    if not chosen:
        return []
    lines = [
        "## Where the tokens come from", "",
        "Per target step: grammar-forced drafts accepted (free: no draft forward), drafts from the drafter "
        "(draft model or prompt lookup) accepted, and the one token the target itself samples (recovered "
        "or bonus, < 1 when the grammar ends inside a draft). Draft fwd/step: draft-model forwards per step.",
        "",
        "| workload | config | tok/step | forced | drafter | target | draft fwd/step | strays/step | strays in first "
        "4 tokens |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in chosen:
        steps = r["steps"]
        forced = r["forced_accepted_tokens"] / steps
        drafter = (r["accepted_tokens"] - r["forced_accepted_tokens"]) / steps
        target = r["completion_tokens"] / steps - forced - drafter
        lines.append(
            f"| {r['workload']} | {r['config']} | {_fmt(r.get('mean_accepted_length'))} | {forced:.2f} | {drafter:.2f} "
            f"| {target:.2f} | {_fmt(_per(r.get('draft_forwards'), steps))} | {_fmt(r.get('stray_rate'), '.3f')} "
            f"| {_fmt(r.get('strays_early_share'))} |"
        )
    lines.append("")
    return lines


def _regions_table(rows: list[dict[str, Any]]) -> list[str]:
    """Acceptance per output region (grammars.regions) for the speculating torch rows."""
    chosen = [r for r in rows if r.get("regions")]
    if not chosen:
        return []
    names = sorted({name for r in chosen for name in r["regions"]})
    lines = [
        "## Where acceptance is won and lost", "",
        "Per output region (forced = placed by the grammar; JSON key / string / number / structure; SQL "
        "keyword / identifier / literal; text outside a structured value): accepted / verified drafts "
        "(verified drafts in parentheses).", "",
        "| workload | config | T | " + " | ".join(names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for r in chosen:
        cells = []
        for name in names:
            entry = r["regions"].get(name)
            cells.append("—" if not entry or not entry["draft_tokens"] else
                         f"{entry['accepted_tokens'] / entry['draft_tokens']:.2f} ({entry['draft_tokens']})")
        lines.append(f"| {r['workload']} | {r['config']} | {r.get('temperature')} | " + " | ".join(cells) + " |")
    return lines + [""]


def _noise_check(rows: list[dict[str, Any]]) -> list[str]:
    """At T=0 without a grammar, the three draft-model configurations do identical work (same
    tokens, same forwards): the spread of their tokens/s is this run's timing noise."""
    same = [r.get("tokens_per_second") for r in rows if r["workload"] == "chat" and r["temperature"] == 0
            and r["config"] in ("spec-unmasked-draft", "spec-raw-q", "specgate")]
    values = [v for v in same if v]
    if len(values) < 2:
        return []
    spread = max(values) / min(values) - 1
    return [f"Timing noise check: on `chat` at T=0 the three draft-model configurations do identical work; "
            f"their decode tokens/s differ by {spread:.0%} (max/min − 1) in this run. Differences in speedup "
            "smaller than that are noise.", ""]


def _per(value: Any, steps: int) -> float | None:
    return None if value is None else float(value) / steps


def rerender(json_path: pathlib.Path, md_path: pathlib.Path) -> dict[str, Any]:
    """Re-aggregate a results JSON from its `requests` (stored main matrix first, then the K
    sweep, then the temperature sweep, as `run_bench` writes them) and rewrite the JSON and
    its markdown table: new columns without re-measuring."""
    from benchmarks.suite.metrics import aggregate
    from benchmarks.suite.records import RequestRecord

    document = json.loads(json_path.read_text())
    records = [RequestRecord(**r) for r in document["requests"]]
    n_main = sum(row["requests"] for row in document["results"])
    n_k = sum(row["requests"] for row in document["sweeps"]["k"])
    document["results"] = aggregate(records[:n_main])
    document["sweeps"] = {"k": aggregate(records[n_main:n_main + n_k]),
                          "temperature": aggregate(records[n_main + n_k:])}
    from benchmarks.suite.plots import plot_sweeps

    document["plots"] = plot_sweeps(document, json_path.parent, json_path.stem)
    write_json(document, json_path)
    md_path.write_text(markdown(document))
    return document
