"""The Text2SQL question set: Spider dev questions of the shared databases, as bench cases.

`spider_questions(data_dir)` reads dev.json (377 questions over 8 databases);
`stratified_sample(questions, per_db, seed)` takes `per_db` questions from every database
(all of a database's when it has fewer; `per_db` 0 = every question), chosen by
`random.Random(seed)`, in dev.json order; `text2sql_cases(...)` turns them into
`benchmarks.suite.workloads.Case`s: the DDL (`compact_ddl`) and the question in the prompt, and either the
schema-aware SQL grammar (`constrained=True`) or no constraint. `extract_sql(text)` is the
post-processing both arms get: the first ```sql fenced block if any, else the text, cut at
the first ";". Knows nothing of models.
"""

from __future__ import annotations

import json
import pathlib
import random
import re
from typing import Any

from benchmarks.suite.workloads import Case

_FENCE = re.compile(r"```[a-zA-Z]*\s*(.*?)(?:```|$)", re.DOTALL)


def spider_dir(data_dir: pathlib.Path) -> pathlib.Path:
    return data_dir / "text2sql" / "spider"


def spider_questions(data_dir: pathlib.Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((spider_dir(data_dir) / "dev.json").read_text())
    return rows


def ddl_of(data_dir: pathlib.Path, db_id: str) -> str:
    return (spider_dir(data_dir) / "ddl" / f"{db_id}.sql").read_text()


def compact_ddl(ddl: str) -> str:
    """The DDL for the prompt: comments dropped, and quotes where the name needs none, one line
    per table (~40% fewer tokens, same tables, columns, types and keys; prefill dominates a
    CPU request). A name that needs its quotes keeps them (BIRD's "Academic Year")."""
    text = re.sub(r'"([A-Za-z_][A-Za-z0-9_]*)"', r"\1", re.sub(r"--[^\n]*\n?", "", ddl))
    text = re.sub(r"\(\s*\n\s*", "(", text)
    text = re.sub(r",\s*\n\s*", ", ", text)
    return re.sub(r"\s*\n\s*\)", ")", text).strip()


def stratified_sample(questions: list[dict[str, Any]], per_db: int, seed: int) -> list[tuple[int, dict[str, Any]]]:
    """(index in dev.json, question) pairs, `per_db` per database, in dev.json order."""
    by_db: dict[str, list[int]] = {}
    for index, row in enumerate(questions):
        by_db.setdefault(row["db_id"], []).append(index)
    rng = random.Random(seed)
    chosen: list[int] = []
    for db_id in sorted(by_db):
        indices = by_db[db_id]
        chosen += indices if per_db <= 0 or per_db >= len(indices) else rng.sample(indices, per_db)
    return [(index, questions[index]) for index in sorted(chosen)]


def text2sql_cases(data_dir: pathlib.Path, per_db: int, seed: int, *, constrained: bool) -> list[Case]:
    cases = []
    for index, row in stratified_sample(spider_questions(data_dir), per_db, seed):
        ddl = ddl_of(data_dir, row["db_id"])
        prompt = (f"SQLite database schema:\n{compact_ddl(ddl)}\nWrite one SQLite query that answers: {row['question']}\n"
                  "Answer with the SQL query only.")
        body = {"response_format": {"type": "sql", "sql": {"dialect": "sqlite", "schema": ddl}}} if constrained else {}
        cases.append(Case(
            case_id=f"spider-dev-{index}",
            messages=[{"role": "user", "content": prompt}],
            body=body,
            check={"kind": "sql", "ddl": ddl, "db_id": row["db_id"], "gold": row["query"], "extract": not constrained},
        ))
    return cases


def extract_sql(text: str) -> str:
    fenced = _FENCE.search(text)
    sql = fenced.group(1) if fenced else text
    return sql.split(";")[0].strip()
