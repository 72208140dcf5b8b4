"""The bench end to end on the tiny random pair (torch configurations + the HF peer): it
writes a JSON with the documented fields for every (workload, config) cell, a markdown
table, sweep plots; the engine's new counters behave (a masked draft never strays)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from benchmarks.suite.configs import TORCH_CONFIGS
from benchmarks.suite.report import REQUIRED_FIELDS
from benchmarks.suite.runner import quick_settings, run_bench

WORKLOADS = ("json", "tools", "sql", "chat")
CONFIGS = (*(c for c, cfg in TORCH_CONFIGS.items() if not cfg.llama_draft), "hf-assisted")  # tiny models: no GGUF


@pytest.fixture(scope="module")
def bench_doc(tiny_target_dir: pathlib.Path, tiny_draft_dir: pathlib.Path, data_dir: pathlib.Path,
              tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], pathlib.Path]:
    out = tmp_path_factory.mktemp("bench") / "bench_tiny.json"
    settings = quick_settings(
        target=str(tiny_target_dir), draft=str(tiny_draft_dir), dtype="float32", data_dir=str(data_dir),
        workloads=WORKLOADS, configs=CONFIGS, variant_workloads=("json-ws1",), num_cases=1, max_tokens=6,
        k_sweep=(1, 2), temperature_sweep=(0.0, 1.0), sweep_cases=1, out=str(out),
    )
    document = run_bench(settings, log=lambda _line: None)
    return document, out


def test_json_has_every_cell_with_documented_fields(bench_doc: tuple[dict[str, Any], pathlib.Path]) -> None:
    document, out = bench_doc
    on_disk = json.loads(out.read_text())
    assert on_disk["results"] == json.loads(json.dumps(document["results"], default=str))
    assert {"cpu_count", "torch_threads", "torch", "cpu", "cpu_flags", "dtype"} <= set(on_disk["machine"])
    assert on_disk["machine"]["forward_costs"]["target_s"]  # the costs the engine measured, in the header
    cells = {(row["workload"], row["config"]) for row in on_disk["results"]}
    assert {(w, c) for w in WORKLOADS for c in CONFIGS} <= cells
    assert {("json-ws1", c) for c in ("no-spec", "spec-unmasked-draft", "specgate")} <= cells
    for row in on_disk["results"]:
        if row["config"] in TORCH_CONFIGS:
            assert row["errors"] == 0, row
            assert set(REQUIRED_FIELDS) <= set(row), row
            assert row["tokens_per_second"] > 0 and 0.0 <= row["validity"] <= 1.0
            assert row["latency_p50_s"] <= row["latency_p99_s"]
            assert 0 < row["ttft_p50_s"] <= row["ttft_p99_s"] <= row["latency_p99_s"]
    by_cell = {(row["workload"], row["config"]): row for row in on_disk["results"]}
    assert by_cell[("json", "no-spec")]["speedup"] == pytest.approx(1.0)
    assert by_cell[("json", "specgate-fixed-k")]["predicted_speedup"] is not None
    assert by_cell[("json", "specgate-fixed-k")]["cost_predicted_speedup"] > 0  # engine.pacing.cost_model's prediction
    assert by_cell[("json", "specgate")]["cost_predicted_speedup"] > 0  # adaptive K: what serve does
    hf_chat = by_cell[("chat", "hf-assisted")]
    assert hf_chat["errors"] == 0 and hf_chat["completion_tokens"] > 0


def test_counters(bench_doc: tuple[dict[str, Any], pathlib.Path]) -> None:
    document, _ = bench_doc
    for request in document["requests"]:
        if request["error"] is not None or request["config"] not in TORCH_CONFIGS:
            continue
        if request["config"] in ("specgate", "ngram", "forced-only", "no-spec") or request["workload"] == "chat":
            assert request["draft_strays"] == 0, request
        assert request["forced_accepted_tokens"] <= request["forced_draft_tokens"] <= request["draft_tokens"]
        assert request["forced_accepted_tokens"] <= request["accepted_tokens"]
        if request["config"] in ("no-spec", "ngram", "forced-only"):
            assert request["draft_forwards"] == 0
        if request["config"] == "forced-only":
            assert request["forced_draft_tokens"] == request["draft_tokens"]


def test_markdown_and_plots(bench_doc: tuple[dict[str, Any], pathlib.Path]) -> None:
    document, out = bench_doc
    text = out.with_suffix(".md").read_text()
    for workload in WORKLOADS:
        assert f"## {workload}" in text
    for config in CONFIGS:
        assert f"| {config} |" in text
    assert len(document["plots"]) == 2
    for plot in document["plots"]:
        assert pathlib.Path(plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## Time to first token and the cost model" in text and "forward costs (" in text
    k_values = {row["k"] for row in document["sweeps"]["k"] if row["config"] == "specgate-fixed-k"}
    assert k_values == {1, 2}
    temperatures = {row["temperature"] for row in document["sweeps"]["temperature"]}
    assert temperatures == {0.0, 1.0}


def test_vllm_rows_unavailable_are_marked_not_faked(monkeypatch: pytest.MonkeyPatch, data_dir: pathlib.Path) -> None:
    from benchmarks.suite import vllm_rows
    from benchmarks.suite.workloads import load_workload

    monkeypatch.setattr(vllm_rows, "vllm_unavailable_reason", lambda: "no vllm here")
    records = vllm_rows.vllm_records([load_workload("json", 2, data_dir=data_dir)], "vllm-native",
                                     k=4, temperature=0.0, max_tokens=8)
    assert [r.error for r in records] == ["unavailable: no vllm here"] * 2
    assert all(r.completion_tokens == 0 and r.valid is None for r in records)


def test_cli_rejects_unknown_config() -> None:
    from cli import main

    assert main(["bench", "--quick", "--configs", "no-spec,turbo"]) == 2


def test_rerender_reproduces_the_rows(bench_doc: tuple[dict[str, Any], pathlib.Path],
                                      tmp_path: pathlib.Path) -> None:
    from benchmarks.suite.report import rerender

    _, out = bench_doc
    copy = tmp_path / "copy.json"
    copy.write_text(out.read_text())
    before = json.loads(copy.read_text())
    rerender(copy, tmp_path / "copy.md")
    after = json.loads(copy.read_text())
    assert after["results"] == before["results"]
    assert after["sweeps"] == before["sweeps"]
    assert "## Where the tokens come from" in (tmp_path / "copy.md").read_text()


def test_vllm_rows_one_call_per_config_and_mapping(monkeypatch: pytest.MonkeyPatch, data_dir: pathlib.Path) -> None:
    import sys
    import types

    from benchmarks.suite import vllm_rows
    from benchmarks.suite.workloads import load_workload

    calls = []

    def run_vllm_config(config_name: str, prompts: list[Any], *, max_tokens: int, temperature: float,
                        k: int) -> list[dict[str, Any]]:
        calls.append((config_name, len(prompts), max_tokens, temperature, k))
        return [{"text": '{"x": 1}', "completion_tokens": 7, "steps": 3, "draft_tokens": 8, "accepted_tokens": 4,
                 "latency_s": 2.0, "finish_reason": "stop", "error": None} for _ in prompts]

    fake = types.ModuleType("benchmarks.vllm.configs")
    fake.run_vllm_config = run_vllm_config  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "benchmarks.vllm.configs", fake)
    monkeypatch.setattr(vllm_rows, "vllm_unavailable_reason", lambda: None)
    workloads = [load_workload("json", 2, data_dir=data_dir), load_workload("sql", 1, data_dir=data_dir)]
    records = vllm_rows.vllm_records(workloads, "specgate-vllm", k=4, temperature=0.7, max_tokens=9)
    assert calls == [("specgate-vllm", 3, 9, 0.7, 4)]
    assert [r.workload for r in records] == ["json", "json", "sql"]
    assert all(r.timing == "e2e" and r.accepted_tokens == 4 and r.decode_time_s == 2.0 for r in records)
    assert [r.valid for r in records] == [False, False, False]  # '{"x": 1}' fits neither schema nor SQL


def test_sweep_points_equal_to_main_cells_are_measured_once(bench_doc: tuple[dict[str, Any], pathlib.Path]) -> None:
    document, _ = bench_doc
    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["workload"], r["case_id"], r["config"], r["k"], r["temperature"])
    main = {key(r): r for r in document["requests"][:sum(row["requests"] for row in document["results"])]}
    t_sweep = [r for r in document["requests"] if r["temperature"] == 0.0 and r["config"] == "specgate"
               and r["k"] == 4 and r["workload"] == "json"]
    assert len(t_sweep) == 2  # once in the main matrix, once as the T=0 sweep point
    assert t_sweep[0] == t_sweep[1] == main[key(t_sweep[0])]
    no_spec = [r for r in document["requests"]
               if r["config"] == "no-spec" and r["workload"] == "json" and r["temperature"] == 0.0]
    assert len(no_spec) == 3 and len({r["latency_s"] for r in no_spec}) == 1  # main, K sweep, T=0 sweep: one measurement
