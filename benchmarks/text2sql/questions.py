"""Text2SQL questions from two families of databases, and the stream a service would see.

`Question`: one question of a database family ("spider": Spider dev, "bird": BIRD mini-dev),
with its gold query, its database's DDL (no rows) and, for BIRD, its evidence line (BIRD's
external knowledge, appended to the prompt as BIRD's own baselines do).
- `load_questions(data_dir, family)`: every question of a family, in file order (Spider
  dev.json: 377 over 8 databases; BIRD mini_dev_sqlite.json: 252 over 6).
- `question_stream(by_family, per_db, seed)`: `per_db` questions per database (all of a
  smaller one; chosen with `random.Random(seed)`), interleaved round-robin over every database
  of every family in a seeded order, so the first pass asks each database once: with `per_db`
  questions per database, 1/`per_db` of the requests hit a schema not seen before.
- `question_case(q, constrained=...)`: the bench `Case` (the DDL compacted by
  `sample.compact_ddl` and the question in the prompt; the schema-aware SQL grammar, or none).
Knows nothing of models or of how answers are judged.
"""

from __future__ import annotations

import json
import pathlib
import random
from dataclasses import dataclass

from benchmarks.suite.workloads import Case
from benchmarks.text2sql.sample import compact_ddl

FAMILIES = ("spider", "bird")


@dataclass(frozen=True)
class Question:
    family: str
    index: int
    db_id: str
    question: str
    gold: str
    ddl: str
    evidence: str = ""

    @property
    def case_id(self) -> str:
        return f"{self.family}-{self.index}"


def family_dir(data_dir: pathlib.Path, family: str) -> pathlib.Path:
    return data_dir / "text2sql" / {"spider": "spider", "bird": "bird_minidev"}[family]


def load_questions(data_dir: pathlib.Path, family: str) -> list[Question]:
    if family not in FAMILIES:
        raise ValueError(f"unknown database family {family!r}; expected one of {FAMILIES}")
    root = family_dir(data_dir, family)
    rows = json.loads((root / ("dev.json" if family == "spider" else "mini_dev_sqlite.json")).read_text())
    ddls: dict[str, str] = {}
    out = []
    for index, row in enumerate(rows):
        db = row["db_id"]
        if db not in ddls:
            ddls[db] = (root / "ddl" / f"{db}.sql").read_text()
        out.append(Question(family, index, db, row["question"], row["query"] if family == "spider" else row["SQL"],
                            ddls[db], (row.get("evidence") or "").strip()))
    return out


def question_stream(by_family: dict[str, list[Question]], per_db: int, seed: int) -> list[Question]:
    """`per_db` questions per database, round-robin over all databases in a seeded order."""
    rng = random.Random(seed)
    per_database: dict[str, list[Question]] = {}
    for family in sorted(by_family):
        for q in by_family[family]:
            per_database.setdefault(f"{family}/{q.db_id}", []).append(q)
    chosen: list[list[Question]] = []
    for key in sorted(per_database):
        qs = per_database[key]
        picked = qs if per_db <= 0 or per_db >= len(qs) else rng.sample(qs, per_db)
        chosen.append(sorted(picked, key=lambda q: q.index))
    rng.shuffle(chosen)
    stream: list[Question] = []
    for round_ in range(max((len(qs) for qs in chosen), default=0)):
        stream += [qs[round_] for qs in chosen if round_ < len(qs)]
    return stream


def prompt_of(q: Question) -> str:
    evidence = f"\nEvidence: {q.evidence}" if q.evidence else ""
    return (f"SQLite database schema:\n{compact_ddl(q.ddl)}\nWrite one SQLite query that answers: {q.question}"
            f"{evidence}\nAnswer with the SQL query only.")


def question_case(q: Question, *, constrained: bool) -> Case:
    body = ({"response_format": {"type": "sql", "sql": {"dialect": "sqlite", "schema": q.ddl}}}
            if constrained else {})
    return Case(case_id=q.case_id, messages=[{"role": "user", "content": prompt_of(q)}], body=body,
                check={"kind": "sql", "ddl": q.ddl, "db_id": q.db_id, "gold": q.gold, "extract": not constrained,
                       "family": q.family})
