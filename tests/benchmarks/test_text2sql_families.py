"""Text2SQL over two database families: BIRD questions with evidence, the interleaved stream of
questions over many databases, and the per-family summary (dead ends and runaways counted)."""

from __future__ import annotations

import pathlib
from typing import Any

from benchmarks.text2sql.evaluate import family_suites, summarize
from benchmarks.text2sql.questions import load_questions, prompt_of, question_case, question_stream
from benchmarks.text2sql.sample import compact_ddl


def test_bird_questions_carry_evidence_and_their_schema(data_dir: pathlib.Path) -> None:
    bird = load_questions(data_dir, "bird")
    assert len(bird) == 252 and len({q.db_id for q in bird}) == 6
    with_evidence = next(q for q in bird if q.evidence)
    assert f"\nEvidence: {with_evidence.evidence}\n" in prompt_of(with_evidence)
    assert "CREATE TABLE" in with_evidence.ddl and with_evidence.gold.upper().startswith("SELECT")
    spider = load_questions(data_dir, "spider")
    assert len(spider) == 377 and "Evidence" not in prompt_of(spider[0])
    case = question_case(with_evidence, constrained=True)
    assert case.body["response_format"]["sql"]["schema"] == with_evidence.ddl and case.check["family"] == "bird"


def test_compact_ddl_keeps_the_quotes_a_name_needs() -> None:
    ddl = 'CREATE TABLE "frpm" (\n  "CDSCode" TEXT,\n  "Academic Year" TEXT,\n  PRIMARY KEY ("CDSCode")\n);'
    assert compact_ddl(ddl) == 'CREATE TABLE frpm (CDSCode TEXT, "Academic Year" TEXT, PRIMARY KEY (CDSCode));'


def test_stream_meets_every_database_once_before_any_twice(data_dir: pathlib.Path) -> None:
    by_family = {f: load_questions(data_dir, f) for f in ("spider", "bird")}
    stream = question_stream(by_family, 2, seed=0)
    keys = [f"{q.family}/{q.db_id}" for q in stream]
    assert len(stream) == 28 and len(set(keys[:14])) == 14  # the first pass meets each database once
    assert set(keys[:14]) == set(keys[14:])  # the second pass revisits the same 14 databases
    assert {q.family for q in stream[:14]} == {"spider", "bird"}
    assert stream == question_stream(by_family, 2, seed=0) != question_stream(by_family, 2, seed=1)
    assert len(question_stream(by_family, 0, seed=0)) == 377 + 252


def test_bird_suites_run_every_gold_query(data_dir: pathlib.Path) -> None:
    bird = [q for q in load_questions(data_dir, "bird") if q.db_id in ("toxicology", "debit_card_specializing")]
    suites = family_suites(bird, seed=0)
    assert set(suites) == {"bird/toxicology", "bird/debit_card_specializing"}
    for q in bird:
        assert all(o.rows is not None for o in suites[f"bird/{q.db_id}"].run(q.gold)), q.gold


def _record(name: str, *, family: str = "bird", db: str = "toxicology", new: bool = True, latency: float = 10.0,
            error: str | None = None, finish: str = "stop", correct: bool = True, steps: int = 10,
            first_draft_step: int | None = None, pacing: str | None = None) -> dict[str, Any]:
    return {"name": name, "family": family, "db_id": db, "new_schema": new, "latency_s": latency, "error": error,
            "finish_reason": finish, "correct": correct, "runs": correct, "steps": steps, "completion_tokens": 20,
            "draft_tokens": 8 if first_draft_step else 0, "accepted_tokens": 6 if first_draft_step else 0,
            "decode_tokens": 19, "decode_time_s": latency - 1, "text": "SELECT 1",
            "dead_end": error is not None and "dead end" in error, "runaway": finish == "length",
            "first_draft_step": first_draft_step, "pacing_record": pacing}


def test_summary_counts_dead_ends_runaways_and_speed_per_family_and_database() -> None:
    records = [
        _record("grammar/no-spec", latency=12.0, steps=20),
        _record("grammar/specgate", latency=8.0, steps=8, first_draft_step=2, pacing="family"),
        _record("grammar/no-spec", family="spider", db="singer", finish="length", correct=False, steps=20),
        _record("grammar/specgate", family="spider", db="singer", error="GenerationError: grammar allows no token "
                "at step 3 (dead end)", correct=False, steps=3, first_draft_step=None, pacing=""),
    ]
    rows = {(r["scope"], r["config"]): r for r in summarize(records, ("grammar/no-spec", "grammar/specgate"))}
    assert rows[("bird", "grammar/specgate")]["speedup"] == 12.0 / 8.0
    assert rows[("bird", "grammar/specgate")]["drafted_from_first_decode_step"] == 1.0
    assert rows[("bird", "grammar/specgate")]["paced_by"]["family"] == 1
    assert rows[("spider", "grammar/specgate")]["dead_ends"] == 1 and rows[("spider", "grammar/no-spec")]["runaways"] == 1
    assert rows[("all", "grammar/specgate")]["exec_acc"] == 0.5 and rows[("all", "grammar/specgate")]["dead_ends"] == 1
    assert ("spider/singer", "grammar/no-spec") in rows and ("first on its database", "grammar/specgate") in rows
    assert rows[("spider", "grammar/no-spec")]["drafted_from_first_decode_step"] is None  # no draft model there
