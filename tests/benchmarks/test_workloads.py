"""Workload loaders: deterministic, spread over the data, OpenAI-shaped bodies that
spec_from_request accepts, and validity oracles that accept the data's own gold answers."""

from __future__ import annotations

import json
import pathlib

import pytest

from benchmarks.suite.validity import is_valid, valid_json, valid_sql, valid_tool_calls
from benchmarks.suite.workloads import WORKLOADS, load_workload, record_name


@pytest.mark.parametrize("name", WORKLOADS)
def test_loader_shapes(name: str, data_dir: pathlib.Path) -> None:
    from grammars import spec_from_request

    workload = load_workload(name, 4, data_dir=data_dir)
    again = load_workload(name, 4, data_dir=data_dir)
    assert [c.case_id for c in workload.cases] == [c.case_id for c in again.cases]
    assert len(workload.cases) == 4 and len({c.case_id for c in workload.cases}) == 4
    for case in workload.cases:
        assert case.messages and case.messages[-1]["role"] == "user"
        spec = spec_from_request(case.body)
        expected = {"json": "json_schema", "json-noschema": "json_schema", "json-ws1": "json_schema",
                    "tools": "tools", "tools-trace": "tools", "sql": "sql", "text2sql": "sql", "text2sql-free": None, "chat": None}[name]
        assert (spec.kind if spec is not None else None) == expected
    assert workload.max_whitespace == (1 if name == "json-ws1" else 16)


def test_schema_in_prompt_or_not(data_dir: pathlib.Path) -> None:
    with_schema = load_workload("json", 2, data_dir=data_dir).cases[0]
    without = load_workload("json-noschema", 2, data_dir=data_dir).cases[0]
    schema_text = json.dumps(with_schema.check["schema"])
    assert schema_text in with_schema.messages[0]["content"]
    assert schema_text not in without.messages[0]["content"]
    assert with_schema.body == without.body  # same grammar either way
    assert record_name("Glaiveai2K---book_flight_1987304d", {}) == "book flight"


def test_tools_cases_carry_tools_for_the_template(data_dir: pathlib.Path) -> None:
    case = load_workload("tools", 1, data_dir=data_dir).cases[0]
    assert case.tools is not None and case.body["tools"] == case.tools
    assert case.body["tool_choice"] == "required"


def test_tool_trace_turns_call_the_same_tool_with_new_arguments(data_dir: pathlib.Path) -> None:
    from benchmarks.suite.tool_traces import TURNS

    cases = load_workload("tools-trace", TURNS + 1, data_dir=data_dir).cases
    trace = cases[:TURNS]
    assert [c.case_id.rsplit("-", 1)[1] for c in trace] == [f"turn{j}" for j in range(TURNS)]
    assert len({c.messages[-1]["content"] for c in trace}) == TURNS  # new arguments each turn
    assert all(c.tools == trace[0].tools for c in trace)
    last = trace[-1].messages
    assert len(last) == 3 * (TURNS - 1) + 1
    calls = [m["tool_calls"][0]["function"] for m in last if m["role"] == "assistant"]
    assert {c["name"] for c in calls} == {trace[0].tools[0]["function"]["name"]}
    assert len({json.dumps(c["arguments"], sort_keys=True) for c in calls}) == TURNS - 1
    assert all(valid_tool_calls(f"<tool_call>\n{json.dumps(c)}\n</tool_call>", trace[0].tools) for c in calls)
    assert cases[TURNS].case_id.endswith("turn0") and cases[TURNS].tools != trace[0].tools


def test_unknown_workload_and_missing_data(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="unknown workload 'xml'"):
        load_workload("xml", 1, data_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_workload("json", 1, data_dir=tmp_path / "nope")


def test_sql_oracle_accepts_gold_and_rejects_wrong_columns(data_dir: pathlib.Path) -> None:
    root = data_dir / "text2sql" / "spider"
    rows = json.loads((root / "dev.json").read_text())[:40]
    for row in rows:
        ddl = (root / "ddl" / f"{row['db_id']}.sql").read_text()
        assert valid_sql(row["query"], ddl), row["query"]
    ddl = (root / "ddl" / "concert_singer.sql").read_text()
    assert not valid_sql("SELECT nonexistent_column FROM singer", ddl)
    assert not valid_sql("SELECT count(*) FROM nowhere", ddl)
    assert not valid_sql("", ddl)
    assert not valid_sql("SELEC 1", ddl)


def test_json_and_tool_oracles() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert valid_json('{"a": 1}', schema)
    assert not valid_json('{"a": "x"}', schema)
    assert not valid_json('```json\n{"a": 1}\n```', schema)
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    assert valid_tool_calls('<tool_call>\n{"name": "f", "arguments": {"a": 2}}\n</tool_call>', tools)
    assert not valid_tool_calls('<tool_call>\n{"name": "g", "arguments": {"a": 2}}\n</tool_call>', tools)
    assert not valid_tool_calls('<tool_call>\n{"name": "f", "arguments": {"a": 2.5}}\n</tool_call>', tools)
    assert not valid_tool_calls("no call at all", tools)
    assert is_valid('{"a": 1}', {"kind": "json", "schema": schema})
    with pytest.raises(ValueError, match="unknown validity check kind"):
        is_valid("", {"kind": "xml"})
