"""The SQL answer policy of the gateway (gateway.sql_answers) without a server: verdict
shape, the retry loop's attempts, sampling of later attempts, and the stream refusal."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from engine import SamplingOptions
from gateway import sql_answers
from gateway.errors import APIError
from gateway.generation import ChoiceResult
from grammars import spec_from_request

SCHEMA = {"tables": {"singer": ["Name", "Age"]}}


def _grammar(sql: dict[str, Any]) -> Any:
    return SimpleNamespace(spec=spec_from_request({"response_format": {"type": "sql", "sql": sql}}))


def test_verdict_shape() -> None:
    grammar = _grammar({"schema": SCHEMA})
    assert sql_answers.verdict(grammar, "SELECT Name FROM singer") == {
        "valid": True, "status": "ok", "error": None, "attempts": 1}
    bad = sql_answers.verdict(grammar, "SELECT salary FROM singer", attempts=2)
    assert bad is not None and bad["valid"] is False and "salary" in bad["error"] and bad["attempts"] == 2
    assert sql_answers.verdict(_grammar({}), "SELECT 1")["status"] == "unchecked"  # type: ignore[index]
    json_grammar = SimpleNamespace(spec=spec_from_request({"response_format": {"type": "json_object"}}))
    assert sql_answers.verdict(json_grammar, "{}") is None
    assert sql_answers.verdict(None, "SELECT 1") is None


def _run_policy(sql: dict[str, Any], texts: list[str], sampling: SamplingOptions) -> tuple[Any, list[int], list[Any]]:
    body = {"response_format": {"type": "sql", "sql": sql}}
    calls: list[SamplingOptions] = []
    pending = list(texts[1:])

    async def rerun(index: int, new: SamplingOptions) -> ChoiceResult:
        calls.append(new)
        return ChoiceResult(index=index, text=pending.pop(0))

    results, attempts = asyncio.run(sql_answers.apply_policy(
        body, _grammar(sql), [ChoiceResult(index=0, text=texts[0])], [sampling], rerun))
    return results, attempts, calls


def test_retry_until_sqlite_accepts() -> None:
    sql = {"schema": SCHEMA, "on_invalid": "retry", "max_attempts": 4, "retry_temperature": 0.4}
    results, attempts, calls = _run_policy(
        sql, ["SELECT x FROM singer", "SELECT y FROM singer", "SELECT Age FROM singer", "SELECT 1"],
        SamplingOptions(temperature=0.0, seed=7))
    assert results[0].text == "SELECT Age FROM singer" and attempts == [3]
    assert [c.temperature for c in calls] == [0.4, 0.4]  # greedy would repeat itself
    assert [c.seed for c in calls] == [8, 9]


def test_retry_gives_up_after_max_attempts_and_report_never_retries() -> None:
    sql = {"schema": SCHEMA, "on_invalid": "retry", "max_attempts": 2}
    results, attempts, calls = _run_policy(sql, ["SELECT x FROM singer", "SELECT y FROM singer"],
                                           SamplingOptions(temperature=0.9, seed=None))
    assert results[0].text == "SELECT y FROM singer" and attempts == [2]
    assert calls[0].temperature == 0.9 and calls[0].seed is None
    _, attempts, calls = _run_policy({"schema": SCHEMA}, ["SELECT x FROM singer"], SamplingOptions())
    assert attempts == [1] and calls == []


def test_retry_refused_with_stream() -> None:
    body = {"response_format": {"type": "sql", "sql": {"schema": SCHEMA, "on_invalid": "retry"}}}
    sql_answers.check_policy(body, stream=False)
    with pytest.raises(APIError) as info:
        sql_answers.check_policy(body, stream=True)
    assert info.value.param == "response_format.sql.on_invalid"
