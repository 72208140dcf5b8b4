"""The `sql` verdict field on a real server (tiny random Qwen pair): on every choice, on the
last chunk of a stream (equal to the non-streamed one at T=0), and the retry policy's 400s.
Text is gibberish; the verdict is re-derived here with sqlite itself."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

DDL = 'CREATE TABLE singer ("Singer_ID" INT, "Name" TEXT, "Age" INT);\nCREATE TABLE concert ("concert_ID" INT, "Name" TEXT);'
MESSAGES = [{"role": "user", "content": "How many singers are there? Answer with SQL."}]


def _sqlite_runs(query: str) -> bool:
    connection = sqlite3.connect(":memory:")
    connection.executescript(DDL)
    try:
        connection.execute("EXPLAIN " + query.strip().rstrip(";"))
    except sqlite3.Error:
        return False
    return True


def _body(model_id: str, **sql: Any) -> dict[str, Any]:
    return {"model": model_id, "messages": MESSAGES, "temperature": 0, "max_tokens": 40,
            "response_format": {"type": "sql", "sql": {"dialect": "sqlite", "schema": DDL, **sql}}}


def test_sql_field_on_choices_and_last_chunk(http: Any, openapi: Any, model_id: str) -> None:
    r = http.post("/v1/chat/completions", json=_body(model_id))
    assert r.status_code == 200, r.text
    data = r.json()
    openapi.validate(data, "CreateChatCompletionResponse")
    choice = data["choices"][0]
    verdict = choice["sql"]
    assert set(verdict) == {"valid", "status", "error", "attempts"} and verdict["attempts"] == 1
    if choice["finish_reason"] == "stop":
        assert verdict["valid"] == _sqlite_runs(choice["message"]["content"])
    chunks = []
    with http.stream("POST", "/v1/chat/completions", json={**_body(model_id), "stream": True}) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: "):]))
    for chunk in chunks:
        openapi.validate(chunk, "CreateChatCompletionStreamResponse")
    last = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]][-1]["choices"][0]
    assert last["sql"] == verdict
    assert all("sql" not in c["choices"][0] for c in chunks if c["choices"] and not c["choices"][0]["finish_reason"])


def test_retry_policy_errors_and_attempts(http: Any, model_id: str) -> None:
    r = http.post("/v1/chat/completions", json={**_body(model_id, on_invalid="retry"), "stream": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format.sql.on_invalid"
    r = http.post("/v1/chat/completions", json=_body(model_id, on_invalid="sometimes"))
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format.sql.on_invalid"
    r = http.post("/v1/chat/completions", json={**_body(model_id, on_invalid="retry", max_attempts=3), "seed": 1})
    assert r.status_code == 200, r.text
    verdict = r.json()["choices"][0]["sql"]
    assert 1 <= verdict["attempts"] <= 3
    assert verdict["valid"] or verdict["attempts"] == 3


def test_completions_carry_the_same_sql_verdict(http: Any, openapi: Any, model_id: str) -> None:
    """`/v1/completions` with an SQL constraint: `sql` on the choice (checked against sqlite
    here), on the finishing chunk of a stream (equal at T=0), on no other chunk, and the
    retry policy's 400 on a stream."""
    sql = {"dialect": "sqlite", "schema": DDL}
    body = {"model": model_id, "prompt": "-- How many singers are there?\nSELECT", "temperature": 0,
            "max_tokens": 40, "structured_outputs": {"sql": sql}}
    r = http.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    verdict = choice["sql"]
    assert set(verdict) == {"valid", "status", "error", "attempts"} and verdict["attempts"] == 1
    if choice["finish_reason"] == "stop":
        assert verdict["valid"] == _sqlite_runs(choice["text"])
    else:
        assert verdict["valid"] is False
    chunks = []
    with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: "):]))
    finishing = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finishing) == 1 and finishing[0]["sql"] == verdict
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == choice["text"]
    assert all("sql" not in c["choices"][0] for c in chunks if c["choices"] and not c["choices"][0]["finish_reason"])
    r = http.post("/v1/completions", json={**body, "stream": True,
                                            "structured_outputs": {"sql": {**sql, "on_invalid": "retry"}}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "structured_outputs.sql.on_invalid"
    plain = http.post("/v1/completions", json={k: v for k, v in body.items() if k != "structured_outputs"})
    assert plain.status_code == 200 and "sql" not in plain.json()["choices"][0]


def test_close_within_max_tokens_ends_the_answers_on_sql_that_runs(http: Any, model_id: str) -> None:
    """The random model wanders; with the option the answers end on the grammar's stop within
    max_tokens on a query sqlite compiles, the closing counted in `usage.closing_tokens`."""
    closed = 0
    for seed in range(3):
        body = {**_body(model_id), "temperature": 1.0, "seed": seed, "close_within_max_tokens": True}
        r = http.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        data = r.json()
        choice = data["choices"][0]
        assert data["usage"]["completion_tokens"] <= 40
        if choice["finish_reason"] == "stop" and "`" not in choice["message"]["content"]:
            assert choice["sql"]["valid"] and _sqlite_runs(choice["message"]["content"]), choice
        closed += data["usage"]["closing_tokens"] > 0
    assert closed >= 1
    r = http.post("/v1/chat/completions", json={**_body(model_id), "close_within_max_tokens": "yes"})
    assert r.status_code == 400 and "close_within_max_tokens" in r.text
