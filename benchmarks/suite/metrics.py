"""Aggregate request records into one result row per (workload, config, K, temperature).

Row fields (None where the runner could not measure them):
- `acceptance_rate` = Σ accepted / Σ drafted; `mean_accepted_length` = Σ tokens / Σ steps
  (tokens per target step, bonus/recovered included). For `spec-unmasked-draft` a draft the
  grammar refuses is cut before verification (as vLLM's scheduler does) yet cost a draft
  forward: it counts as drafted and rejected (Σ drafted += strays); `spec-raw-q` already
  verifies (and rejects) its refused draft;
- `stopped` = share of requests that ended by grammar end / stop token (not max_tokens);
- `tokens_per_second` = Σ decode tokens / Σ decode time (first step, which carries the
  prefill, excluded); `e2e_tokens_per_second` = Σ tokens / Σ request latency;
- `speedup` = tokens_per_second / that of the row's baseline on the same workload and
  temperature, measured in the same run (None without that baseline): `no-spec` for the torch
  and HF rows, `vllm-no-spec` for the vLLM rows (vLLM's own plain speed); rows with
  `timing="e2e"` compare end-to-end tokens/s instead, and their `tokens_per_second` includes
  the prefill;
- `repeats`, `tps_min` / `tps_max`: the passes over the cases (vLLM rows: `vllm_repeats`) and
  the lowest / highest decode tokens/s of one pass (None with one pass);
- `plugin_share` (vLLM rows with the plugin's masking): the plugin's own worker host time /
  the worker's step time;
- `predicted_speedup` = `sampler.expected_speedup(α, K, c, verify_cost)` with α the measured
  acceptance, c = measured draft time per step / (K · no-spec step time) (so grammar-forced
  drafts that need no forward lower c) and verify_cost = measured verify time per step /
  no-spec step time; `speedup_vs_predicted` = speedup / predicted_speedup. The model assumes
  i.i.d. acceptance and full K-token proposals: a ratio below 1 says proposals were cut short
  (n-gram misses, strays, grammar end) or acceptances cluster;
- `validity` = share of requests that stopped on their own (not cut at max_tokens) and whose
  output the independent oracle accepts (a cut-off SQL query can still parse; it is not an
  answer); `valid_if_stopped` = the same share among the requests that stopped;
- `mask_share` = verify-side mask time / total step time (masks filled inside the drafter
  count as draft time);
- `forced_share` = grammar-forced accepted drafts / all accepted drafts; `stray_rate` =
  strays per step; `strays_early_share` = strays within the first EARLY_TOKENS tokens / strays;
- `greedy_match` (T=0 only) = share of requests whose output text equals `no-spec`'s on the
  same case: speculation is exact, so anything below 1 is numerics (bf16 logits depend on
  how many positions a forward verifies; near-ties then flip) or an engine bug to look at;
- `latency_p50_s` / `latency_p99_s` over requests (prefill included); `ttft_p50_s` /
  `ttft_p99_s`: time to the first token (prompt, grammar compile and prefill);
- `cost_predicted_speedup` = Σ (decode tokens × plain step) / Σ predicted decode step times,
  both from the forward costs `engine.pacing.cost_model` measured at start (the engine's own model
  of what speculation is worth, fed with the tokens and forwards each step actually had);
  `speedup_vs_cost_model` = speedup / cost_predicted_speedup (1 = the cost model is right);
- `errors` (count) and `error` (the first message).
Knows nothing about models or files.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from benchmarks.suite.configs import BASELINE, TORCH_CONFIGS, VLLM_BASELINE, VLLM_CONFIGS
from benchmarks.suite.records import RequestRecord


def _sum(records: list[RequestRecord], name: str) -> float | None:
    values = [getattr(r, name) for r in records]
    if any(v is None for v in values):
        return None
    return float(sum(values))


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]) of a non-empty list, else None."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def baseline_of(config: str) -> str:
    """The configuration a row's speedup divides by."""
    return VLLM_BASELINE if config in VLLM_CONFIGS else BASELINE


def _spread(ok: list[RequestRecord]) -> dict[str, Any]:
    passes: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in ok:
        passes[r.repeat].append(r)
    tps = [_ratio(float(sum(r.decode_tokens for r in rs)), float(sum(r.decode_time_s for r in rs)))
           for rs in passes.values()]
    values = [v for v in tps if v is not None]
    if len(passes) < 2 or not values:
        return {"repeats": len(passes), "tps_min": None, "tps_max": None}
    return {"repeats": len(passes), "tps_min": min(values), "tps_max": max(values)}


def summarize(records: list[RequestRecord]) -> dict[str, Any]:
    """One row (without the baseline-relative fields) from the records of one cell."""
    first = records[0]
    ok = [r for r in records if r.error is None]
    stopped = [r for r in ok if r.finish_reason == "stop"]
    errors = [r.error for r in records if r.error is not None]
    row: dict[str, Any] = {
        "workload": first.workload, "config": first.config, "k": first.k, "temperature": first.temperature,
        "requests": len(records), "errors": len(errors), "error": errors[0] if errors else None,
    }
    if not ok:
        return row
    tokens = _sum(ok, "completion_tokens")
    steps = _sum(ok, "steps")
    drafted = _sum(ok, "draft_tokens")
    accepted = _sum(ok, "accepted_tokens")
    decode_time = _sum(ok, "decode_time_s")
    decode_steps = _sum(ok, "decode_steps")
    total_time = _sum(ok, "time_target_s")
    step_time_parts = [_sum(ok, n) for n in ("time_draft_s", "time_target_s", "time_mask_s", "time_sampler_s")]
    step_time = None if any(p is None for p in step_time_parts) else sum(p for p in step_time_parts if p)
    strays = _sum(ok, "draft_strays")
    config = TORCH_CONFIGS.get(first.config)
    if drafted is not None and strays and config is not None and not config.draft_mask \
            and config.unmasked_mode == "argmax":
        drafted += strays  # refused drafts cut before verification: drafted, rejected
    forced_accepted = _sum(ok, "forced_accepted_tokens")
    row.update({
        "timing": first.timing,
        "completion_tokens": int(tokens or 0),
        "steps": int(steps or 0),
        "draft_tokens": None if drafted is None else int(drafted),
        "accepted_tokens": None if accepted is None else int(accepted),
        "acceptance_rate": _ratio(accepted, drafted) if drafted else None,
        "mean_accepted_length": _ratio(tokens, steps),
        "tokens_per_second": _ratio(_sum(ok, "decode_tokens"), decode_time),
        "e2e_tokens_per_second": _ratio(tokens, _sum(ok, "latency_s")),
        "decode_step_s": _ratio(decode_time, decode_steps),
        "decode_draft_step_s": _ratio(_sum(ok, "decode_draft_s"), decode_steps),
        "decode_verify_step_s": _ratio(_sum(ok, "decode_verify_s"), decode_steps),
        "validity": sum(1 for r in stopped if r.valid) / len(ok),
        "valid_if_stopped": sum(1 for r in stopped if r.valid) / len(stopped) if stopped else None,
        "stopped": len(stopped) / len(ok),
        "mask_share": _ratio(_sum(ok, "time_mask_s"), step_time) if total_time is not None else None,
        "forced_share": _ratio(forced_accepted, accepted) if accepted else None,
        "forced_draft_tokens": None if _sum(ok, "forced_draft_tokens") is None
        else int(_sum(ok, "forced_draft_tokens") or 0),
        "forced_accepted_tokens": None if forced_accepted is None else int(forced_accepted),
        "regions": _regions(ok),
        "draft_forwards": None if _sum(ok, "draft_forwards") is None else int(_sum(ok, "draft_forwards") or 0),
        "draft_strays": None if strays is None else int(strays),
        "stray_rate": _ratio(strays, steps),
        "strays_early_share": _ratio(_sum(ok, "strays_early"), strays) if strays else None,
        "latency_p50_s": percentile([r.latency_s for r in ok], 50),
        "latency_p99_s": percentile([r.latency_s for r in ok], 99),
        "ttft_p50_s": percentile([r.ttft_s for r in ok if r.ttft_s is not None], 50),
        "ttft_p99_s": percentile([r.ttft_s for r in ok if r.ttft_s is not None], 99),
        "cost_predicted_speedup": _ratio(_sum(ok, "decode_plain_predicted_s"), _sum(ok, "decode_predicted_s")),
        "plugin_share": _ratio(_sum(ok, "plugin_s"), _sum(ok, "worker_step_s")),
        **_spread(ok),
    })
    return row


def add_relative(rows: list[dict[str, Any]]) -> None:
    """Fill speedup, predicted_speedup and speedup_vs_predicted against the no-spec rows."""
    from sampler import expected_speedup

    baseline: dict[tuple[str, str, float], dict[str, Any]] = {}
    for row in rows:
        if row["config"] in (BASELINE, VLLM_BASELINE) and row.get("tokens_per_second"):
            baseline[(row["config"], row["workload"], row["temperature"])] = row
    for row in rows:
        base = baseline.get((baseline_of(row["config"]), row["workload"], row["temperature"]))
        row["speedup"] = row["predicted_speedup"] = row["speedup_vs_predicted"] = None
        row["speedup_vs_cost_model"] = None
        if base is None or not row.get("tokens_per_second"):
            continue
        if row.get("timing") == "e2e":  # no prefill split: compare end to end with the baseline
            if base.get("e2e_tokens_per_second") and row.get("e2e_tokens_per_second"):
                row["speedup"] = row["e2e_tokens_per_second"] / base["e2e_tokens_per_second"]
            continue
        row["speedup"] = row["tokens_per_second"] / base["tokens_per_second"]
        if row.get("cost_predicted_speedup") and row["config"] not in (BASELINE, VLLM_BASELINE):
            row["speedup_vs_cost_model"] = row["speedup"] / row["cost_predicted_speedup"]
        plain_step = base.get("decode_step_s")
        alpha, k = row.get("acceptance_rate"), row.get("k") or 0
        draft_step, verify_step = row.get("decode_draft_step_s"), row.get("decode_verify_step_s")
        if (row["config"] == BASELINE or not plain_step or alpha is None or k <= 0
                or draft_step is None or verify_step is None):
            continue
        c = draft_step / (k * plain_step)
        row["predicted_speedup"] = float(expected_speedup(alpha, k, c, verify_step / plain_step))
        row["speedup_vs_predicted"] = row["speedup"] / row["predicted_speedup"]


def greedy_match(cell: list[RequestRecord], baseline_texts: dict[tuple[str, str, str], str]) -> float | None:
    """Share of a T=0 cell's requests whose output equals its baseline's (`baseline_of`) on the same case."""
    base = baseline_of(cell[0].config)
    pairs = [(r.text, baseline_texts[(base, r.workload, r.case_id)]) for r in cell
             if r.error is None and r.temperature == 0 and (base, r.workload, r.case_id) in baseline_texts]
    return sum(ours == theirs for ours, theirs in pairs) / len(pairs) if pairs else None


def aggregate(records: list[RequestRecord]) -> list[dict[str, Any]]:
    cells: dict[tuple[str, str, int, float], list[RequestRecord]] = defaultdict(list)
    for record in records:
        cells[(record.workload, record.config, record.k, record.temperature)].append(record)
    baseline_texts = {(r.config, r.workload, r.case_id): r.text for r in records
                      if r.config in (BASELINE, VLLM_BASELINE) and r.temperature == 0 and r.error is None}
    rows = []
    for cell in cells.values():
        row = summarize(cell)
        plain = cell[0].config in (BASELINE, VLLM_BASELINE)
        row["greedy_match"] = None if plain else greedy_match(cell, baseline_texts)
        rows.append(row)
    add_relative(rows)
    return rows


def _regions(records: list[Any]) -> dict[str, dict[str, int]] | None:
    """Verified and accepted drafts per output region, summed over the records that count them."""
    counted = [r for r in records if r.region_drafts is not None]
    if not counted:
        return None
    out: dict[str, dict[str, int]] = {}
    for r in counted:
        for region, n in r.region_drafts.items():
            entry = out.setdefault(region, {"draft_tokens": 0, "accepted_tokens": 0})
            entry["draft_tokens"] += n
            entry["accepted_tokens"] += (r.region_accepted or {}).get(region, 0)
    return dict(sorted(out.items()))
