"""Text2SQL evaluation pieces: filled databases, literals, the test-suite match, the sample."""

from __future__ import annotations

import pathlib

import pytest

from benchmarks.text2sql.fill import fill_database
from benchmarks.text2sql.literals import column_literals
from benchmarks.text2sql.sample import extract_sql, stratified_sample, text2sql_cases
from benchmarks.text2sql.schema import read_schema
from benchmarks.text2sql.suite import Outcome, TestSuite, has_top_level_order_by, results_match

DDL = """
CREATE TABLE "stadium" ("Stadium_ID" NUMBER, "Name" TEXT, "Capacity" NUMBER, PRIMARY KEY ("Stadium_ID"));
CREATE TABLE "concert" ("concert_ID" NUMBER, "Theme" TEXT, "Stadium_ID" TEXT, "Year" TEXT,
  PRIMARY KEY ("concert_ID"), FOREIGN KEY ("Stadium_ID") REFERENCES "stadium"("Stadium_ID"));
"""
GOLD = ["SELECT count(*) FROM concert WHERE Year = 2014",
        "SELECT Name FROM stadium WHERE Capacity > 5000 AND Name LIKE '%Park%'",
        "SELECT T2.Name FROM concert AS T1 JOIN stadium AS T2 ON T1.Stadium_ID = T2.Stadium_ID "
        "WHERE T1.Theme IN ('Rock', 'Jazz') ORDER BY T2.Capacity DESC LIMIT 1"]


def test_schema_read_by_sqlite() -> None:
    schema = read_schema(DDL)
    assert list(schema.tables) == ["stadium", "concert"]
    concert = schema.tables["concert"]
    assert [c.kind for c in concert.columns] == ["number", "text", "text", "text"]
    assert concert.foreign_keys == {"Stadium_ID": ("stadium", "Stadium_ID")}
    assert schema.tables["stadium"].columns[0].primary_key


def test_literals_attach_to_columns() -> None:
    literals = column_literals(GOLD, read_schema(DDL))
    assert {2013, 2014, 2015} <= set(literals[("concert", "Year")])
    assert 5000 in literals[("stadium", "Capacity")]
    assert any("Park" in str(v) for v in literals[("stadium", "Name")])
    assert {"Rock", "Jazz"} <= set(literals[("concert", "Theme")])


def test_filled_database_is_seeded_typed_and_fk_consistent() -> None:
    schema = read_schema(DDL)
    literals = column_literals(GOLD, schema)
    a, b, c = (fill_database(schema, literals, seed=s) for s in (1, 1, 2))
    dump = list(a.iterdump())
    assert dump == list(b.iterdump()) and dump != list(c.iterdump())
    ids = [r[0] for r in a.execute('SELECT "Stadium_ID" FROM stadium')]
    assert len(ids) == len(set(ids)) >= 2  # primary key distinct
    assert all(isinstance(v, int | float) for v in ids)
    orphans = a.execute('SELECT count(*) FROM concert WHERE "Stadium_ID" NOT IN (SELECT "Stadium_ID" FROM stadium)')
    assert orphans.fetchone()[0] == 0  # every foreign key points at a parent row


def test_suite_match_semantics() -> None:
    suite = TestSuite.build(DDL, GOLD, databases=6, seed=0)
    assert all(o.rows for o in suite.run(GOLD[1])[:1]) or any(o.rows for o in suite.run(GOLD[1]))
    assert suite.match(GOLD[0], "select COUNT(*) from CONCERT where year = '2014';")
    assert not suite.match(GOLD[0], "SELECT count(*) FROM concert")
    assert not suite.match(GOLD[0], "SELECT count(*) FROM concert WHERE Year > 2014")
    assert not suite.match(GOLD[0], "SELECT nothing FROM concert")  # an error never matches
    assert suite.match("SELECT Name, Capacity FROM stadium", "SELECT Capacity, Name FROM stadium")
    suite.close()


def test_ordered_comparison_only_with_top_level_order_by() -> None:
    assert has_top_level_order_by("SELECT a FROM t ORDER BY a")
    assert not has_top_level_order_by("SELECT a FROM (SELECT a FROM t ORDER BY a)")
    assert not has_top_level_order_by("SELECT 'order by' FROM t")
    gold, swapped = [Outcome(((1,), (2,)))], [Outcome(((2,), (1,)))]
    assert results_match(gold, swapped, ordered=False)
    assert not results_match(gold, swapped, ordered=True)
    assert not results_match(gold, [Outcome(None, "error")], ordered=False)


def test_sample_is_seeded_and_stratified(data_dir: pathlib.Path) -> None:
    import json

    questions = json.loads((data_dir / "text2sql" / "spider" / "dev.json").read_text())
    sample = stratified_sample(questions, 2, seed=0)
    assert sample == stratified_sample(questions, 2, seed=0) != stratified_sample(questions, 2, seed=1)
    dbs = [q["db_id"] for _, q in sample]
    assert len(sample) == 16 and all(dbs.count(db) == 2 for db in set(dbs))
    assert len(stratified_sample(questions, 0, seed=0)) == len(questions)
    grammar, free = (text2sql_cases(data_dir, 1, 0, constrained=c) for c in (True, False))
    assert grammar[0].body["response_format"]["type"] == "sql" and free[0].body == {}
    assert grammar[0].messages == free[0].messages


@pytest.mark.parametrize(("text", "sql"), [
    ("```sql\nSELECT a FROM t;\n```", "SELECT a FROM t"),
    ("SELECT a FROM t; SELECT b FROM t", "SELECT a FROM t"),
    ("Here:\n```\nSELECT 1\n", "SELECT 1"),
])
def test_extract_sql(text: str, sql: str) -> None:
    assert extract_sql(text) == sql
