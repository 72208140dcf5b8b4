"""Writing the results: the JSON document and the markdown table the README embeds.

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

REQUIRED_FIELDS = ("workload", "config", "acceptance_rate", "mean_accepted_length", "tokens_per_second",
                   "speedup", "validity")


def machine_info() -> dict[str, Any]:
    import torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.cuda.is_available(),
    }


def write_json(document: dict[str, Any], path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, default=str) + "\n")


def _fmt(value: Any, spec: str = ".2f") -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def markdown(document: dict[str, Any]) -> str:
    settings = document.get("settings", {})
    lines = [
        "# specgate bench",
        "",
        f"Target `{settings.get('target')}`, draft `{settings.get('draft')}`, {settings.get('dtype')}, "
        f"K={settings.get('k')}, T={settings.get('temperature')}, {settings.get('num_cases')} requests per cell, "
        f"max_tokens={settings.get('max_tokens')}, machine: {document.get('machine', {}).get('cpu_count')} CPUs "
        f"(torch threads {document.get('machine', {}).get('torch_threads')}). Mode: "
        f"{'quick' if settings.get('quick') else 'full'}.",
        "",
        "tok/s: decode tokens per second (prefill step excluded); speedup: over `no-spec` on the same "
        "workload, measured in this run; pred.: measured ÷ predicted by `sampler.expected_speedup` from "
        "the measured α, K, draft and verify costs; mask: verify-side mask share of step time.",
        "",
    ]
    rows = document.get("results", [])
    for workload in dict.fromkeys(row["workload"] for row in rows):
        lines += [
            f"## {workload}", "",
            "| config | accept | tok/step | tok/s | speedup | ÷pred. | valid | mask | forced | strays/step "
            "| p50 s | p99 s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in rows:
            if row["workload"] != workload:
                continue
            if row.get("tokens_per_second") is None and row.get("error"):
                error = str(row.get("error"))
                shown = "unavailable (see below)" if error.startswith("unavailable:") else error[:160]
                lines.append(f"| {row['config']} | {shown.replace('|', '/')} " + "| " * 10 + "|")
                continue
            lines.append(
                f"| {row['config']} | {_fmt(row.get('acceptance_rate'))} | {_fmt(row.get('mean_accepted_length'))} "
                f"| {_fmt(row.get('tokens_per_second'))} | {_fmt(row.get('speedup'))} "
                f"| {_fmt(row.get('speedup_vs_predicted'))} | {_fmt(row.get('validity'))} "
                f"| {_fmt(row.get('mask_share'), '.3f')} | {_fmt(row.get('forced_share'))} "
                f"| {_fmt(row.get('stray_rate'), '.3f')} | {_fmt(row.get('latency_p50_s'), '.1f')} "
                f"| {_fmt(row.get('latency_p99_s'), '.1f')} |"
            )
        lines.append("")
    unavailable = document.get("unavailable") or {}
    if unavailable:
        lines += ["Unavailable configurations:", ""]
        lines += [f"- `{name}`: {reason}" for name, reason in unavailable.items()]
        lines.append("")
    lines += [
        "Columns: accept = accepted ÷ drafted; tok/step = tokens per target forward; forced = share of "
        "accepted drafts that were grammar-forced (free); strays/step = proposals an unmasked draft "
        "model cut or ended at a grammar-refused token, per step; errors show in place of a row.",
        "",
    ]
    for plot in document.get("plots", []):
        lines.append(f"![{pathlib.Path(plot).stem}]({pathlib.Path(plot).name})")
    return "\n".join(lines) + "\n"
