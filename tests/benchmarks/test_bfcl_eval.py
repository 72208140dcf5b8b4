"""The BFCL evaluation's own machinery: argument validity, the per-group summary and the
spec/no-spec pairing on hand-made records; and one whole run of `benchmarks.bfcl_eval.main`
against two real `specgate serve` processes on the tiny random models (their answers are
noise; what is checked is that every request is made, answered, parsed, checked and counted)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from benchmarks.bfcl_eval import Record, invalid_calls, paired, parse_like_gateway, summarise

TOOLS = [{"type": "function", "function": {"name": "ping", "parameters": {
    "type": "object", "properties": {"host": {"type": "string"}}, "required": ["host"]}}}]


def test_invalid_calls_counts_bad_json_schema_violations_and_unknown_tools() -> None:
    good = ("ping", '{"host": "a.org"}')
    assert invalid_calls([good], TOOLS) == 0
    assert invalid_calls([good, ("ping", '{"host": 3}'), ("ping", "{"), ("pong", "{}"), ("ping", "[]")], TOOLS) == 4


def test_the_gateway_parser_reads_tagged_calls() -> None:
    content, calls = parse_like_gateway('Sure.\n<tool_call>\n{"name": "ping", "arguments": {"host": "a"}}\n</tool_call>',
                                        TOOLS)
    assert calls == [("ping", '{"host": "a"}')] and content == "Sure."
    assert parse_like_gateway("no call here", TOOLS) == ("no call here", [])


def _record(qid: str, category: str, server: str, **fields: Any) -> Record:
    return Record(qid, category, server, "required", **fields)


def test_summary_and_pairing() -> None:
    records = [
        _record("q1", "simple_python", "spec", ok=True, calls=[("f", "{}")], completion_tokens=20, latency_s=2.0,
                proposed_tokens=10, accepted_tokens=8, content="x"),
        _record("q1", "simple_python", "no-spec", ok=True, calls=[("f", "{}")], completion_tokens=20, latency_s=4.0,
                content="x"),
        _record("q2", "simple_python", "spec", calls=[("f", "{")], invalid_calls=1, completion_tokens=10,
                latency_s=1.0, proposed_tokens=10, accepted_tokens=2),
        _record("q2", "simple_python", "no-spec", status=500, error="boom"),
        _record("q3", "irrelevance_part1", "spec", ok=True, completion_tokens=5, latency_s=1.0),
    ]
    rows = {(r["category"], r["server"]): r for r in summarise(records)}
    spec = rows[("simple_python", "spec")]
    assert (spec["questions"], spec["accuracy"], spec["call_rate"], spec["invalid_calls"]) == (2, 0.5, 1.0, 1)
    assert spec["tokens_per_s"] == 10.0 and spec["acceptance"] == 0.5
    plain = rows[("simple_python", "no-spec")]
    assert (plain["http_5xx"], plain["accuracy"], plain["tokens_per_s"]) == (1, 0.5, 5.0)
    assert rows[("needs a call", "spec")]["questions"] == 2 and rows[("all", "spec")]["questions"] == 3
    pairs = {p["category"]: p for p in paired(records)}
    assert pairs["simple_python"]["pairs"] == 1  # q2 failed on no-spec: not a pair
    assert pairs["simple_python"]["speedup"] == 2.0 and pairs["simple_python"]["same_output"] == 1


@pytest.mark.slow
def test_a_whole_run_on_tiny_models(tiny_target_dir: pathlib.Path, tiny_draft_dir: pathlib.Path,
                                    tmp_path: pathlib.Path) -> None:
    from benchmarks.bfcl_eval import main

    out = tmp_path / "bfcl"
    flags = f"--model {tiny_target_dir} --draft-model {tiny_draft_dir} --dtype float32 --adaptive-k false"
    assert main(["--per-category", "1", "--categories", "simple_python", "irrelevance_part1",
                 "--max-tokens", "6", "--server-flags", flags, "--out", str(out)]) == 0
    document = json.loads(out.with_suffix(".json").read_text())
    records = document["records"]
    assert len(records) == 2 * 2 * 3  # questions x servers x configs
    assert all(r["status"] == 200 and r["completion_tokens"] > 0 for r in records), records
    assert document["meta"]["free_same_prompt"] == "4/4"
    assert all(r["cached_tokens"] > 0 for r in records)  # the warm-up request cached each prompt
    assert sum(r["proposed_tokens"] for r in records if r["server"] == "spec") > 0
    assert all(r["proposed_tokens"] == 0 for r in records if r["server"] == "no-spec")
    assert "| simple_python | spec | required |" in out.with_suffix(".md").read_text()
