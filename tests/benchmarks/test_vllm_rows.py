"""The vLLM rows of the bench without starting vLLM: `vllm_records` maps a (scripted)
`run_vllm_config` result onto records with decode time apart from TTFT, proposed drafts and
repeats; aggregation divides vLLM rows by `vllm-no-spec` (never by the torch `no-spec`) and
reports the spread across passes and the plugin's share."""

from __future__ import annotations

import pathlib
import sys
import types
from typing import Any

import pytest

from benchmarks.suite import metrics, vllm_rows
from benchmarks.suite.workloads import load_workload

# decode seconds per pass and configuration (2 passes); tokens 9 → 8 decode tokens per request
DECODE_S = {"vllm-no-spec": (4.0, 2.0), "specgate-vllm": (2.0, 1.0), "no-spec": (1.0, 1.0)}


def _fake(calls: list[tuple[Any, ...]]) -> Any:
    def run_vllm_config(config_name: str, prompts: list[Any], *, max_tokens: int, temperature: float,
                        k: int, repeats: int = 1) -> list[dict[str, Any]]:
        calls.append((config_name, len(prompts), repeats))
        plain = config_name == "vllm-no-spec"
        return [{"text": f"out{i}", "completion_tokens": 9, "steps": 8 if plain else 3,
                 "draft_tokens": 0 if plain else 10, "proposed_tokens": 0 if plain else 12,
                 "accepted_tokens": 0 if plain else 6, "latency_s": 9.0, "ttft_s": 0.5,
                 "decode_s": DECODE_S[config_name][rep], "finish_reason": "stop", "error": None, "repeat": rep,
                 "plugin_times": None if plain else {"plugin_s": 0.01, "step_s": 1.0}}
                for rep in range(repeats) for i in range(len(prompts))]

    fake = types.ModuleType("benchmarks.vllm.configs")
    fake.run_vllm_config = run_vllm_config  # type: ignore[attr-defined]
    return fake


def test_vllm_rows_decode_timing_repeats_and_own_baseline(monkeypatch: pytest.MonkeyPatch,
                                                          data_dir: pathlib.Path) -> None:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setitem(sys.modules, "benchmarks.vllm.configs", _fake(calls))
    monkeypatch.setattr(vllm_rows, "vllm_unavailable_reason", lambda: None)
    workloads = [load_workload("json", 2, data_dir=data_dir)]
    records = []
    for config in ("vllm-no-spec", "specgate-vllm"):
        records += vllm_rows.vllm_records(workloads, config, k=4, temperature=0.0, max_tokens=9, repeats=2)
    assert calls == [("vllm-no-spec", 2, 2), ("specgate-vllm", 2, 2)]  # one engine call per config, cases once
    spec = [r for r in records if r.config == "specgate-vllm"]
    assert [r.repeat for r in spec] == [0, 0, 1, 1]
    assert all(r.timing == "decode" and r.ttft_s == 0.5 and r.decode_tokens == 8 for r in spec)
    assert all(r.draft_tokens == 12 for r in spec)  # proposed drafts, not the 10 vLLM verified
    # a torch no-spec row that is 4x faster must not be the vLLM rows' baseline
    from benchmarks.suite.records import RequestRecord

    torch_plain = [RequestRecord("json", "no-spec", r.case_id, 4, 0.0, completion_tokens=9, steps=9,
                                 decode_tokens=8, decode_time_s=1.0, latency_s=1.5, text="x")
                   for r in spec[:2]]
    rows = {row["config"]: row for row in metrics.aggregate(records + torch_plain)}
    spec_row, base_row = rows["specgate-vllm"], rows["vllm-no-spec"]
    assert base_row["tokens_per_second"] == pytest.approx(32 / 12.0)
    assert spec_row["tokens_per_second"] == pytest.approx(32 / 6.0)
    assert spec_row["speedup"] == pytest.approx(2.0)
    assert spec_row["acceptance_rate"] == pytest.approx(6 / 12)
    assert spec_row["repeats"] == 2
    assert (spec_row["tps_min"], spec_row["tps_max"]) == (pytest.approx(16 / 4.0), pytest.approx(16 / 2.0))
    assert spec_row["plugin_share"] == pytest.approx(0.01)
    assert spec_row["greedy_match"] == 1.0  # same texts as vllm-no-spec's
    assert rows["no-spec"]["speedup"] == pytest.approx(1.0)
