"""No dead ends: the schema-aware SQL matcher (grammar and scope layer together) never reaches a
state whose mask allows no token while it cannot stop, and never allows a token it then refuses.

Random walks (tests/grammars/sql_walks.py) sample tokens of the real Qwen2.5 vocabulary from
the mask, over real schemas (Spider and BIRD DDL) and synthetic ones with odd names (spaces,
quotes, keywords, non-ASCII), along random queries with select-list aliases referenced
later, literals holding `=`, quotes and `%`, and random tokens. The regression cases are the
dead ends such walks found: a bracketed or backticked name after FROM that nothing lets
qualify (`TYPEOF([x]`), a bare select-list alias after FROM (`ORDER BY percentage`: the
grammar reads it only as a qualifier, the reader would not qualify it), SELECT / DISTINCT
right after a call's bracket, and a column name with a space typed bare (`T1.Low`)."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from grammars import spec_from_request
from grammars.sql.grammar import parse_sql_schema
from tests.conftest import DATA
from tests.grammars.sql.sql_walks import Walker, WalkReport
from tokenmask import unpack_bitmask

TEXT2SQL = DATA / "text2sql"
TOXICOLOGY = TEXT2SQL / "bird_minidev" / "ddl" / "toxicology.sql"
# odd names: spaces, a keyword as a table and a column, quotes inside names, non-ASCII
ODD = ('CREATE TABLE "order" ("select" INT, "Low Grade" TEXT, "café" TEXT, [a"b] INT, `x y` TEXT, id INT);\n'
       'CREATE TABLE "my table" (id INT, "group" TEXT, "名前" TEXT, low INT, "Academic Year" TEXT);\n'
       'CREATE TABLE t (value TEXT, "percent %" REAL, "=" TEXT);')


def _compiled(compiler: Any, ddl: str) -> Any:
    return compiler.compile(spec_from_request({"response_format": {"type": "sql", "sql": {"schema": ddl}}}))


def _walks(compiler: Any, ddl: str, *, walks: int, steps: int, seed: int) -> WalkReport:
    walker = Walker(_compiled(compiler, ddl), parse_sql_schema(ddl), seed=seed)
    report = WalkReport()
    for _ in range(walks):
        walker.walk(report, steps=steps)
    return report


@pytest.mark.parametrize("ddl", [TOXICOLOGY.read_text(), ODD], ids=["toxicology", "odd_names"])
def test_random_walks_reach_no_dead_end(xgr_compiler: Any, ddl: str) -> None:
    report = _walks(xgr_compiler, ddl, walks=6, steps=50, seed=0)
    assert report.dead_ends == [] and report.refused == []
    assert report.tokens > 150


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(TEXT2SQL.glob("*/ddl/*.sql")), ids=lambda p: p.stem)
def test_random_walks_reach_no_dead_end_on_every_schema(xgr_compiler: Any, path: pathlib.Path) -> None:
    report = _walks(xgr_compiler, path.read_text(), walks=25, steps=60, seed=1)
    assert report.dead_ends == [] and report.refused == []


@pytest.mark.parametrize("opener,closer", [("[", "]"), ("`", "`")])
def test_a_quoted_operand_after_from_is_no_dead_end(xgr_compiler: Any, opener: str, closer: str) -> None:
    """The dead end the slow walk over dog_kennels met: a quoted name that is no column is
    read by the grammar only as a qualifier, which the reader refuses unless the name is
    bound. Such a name is refused as it is typed (`[x`), never once closed: every position
    along the way allows some token, and a name in scope still qualifies."""
    compiled = _compiled(xgr_compiler, (TEXT2SQL / "spider" / "ddl" / "dog_kennels.sql").read_text())
    bitmask = xgr_compiler.allocate_bitmask(1)
    prefix = "SELECT dog_id FROM Dogs WHERE TYPEOF("
    for name, accepted in ((f"{opener}x{closer}", False), (f"{opener}Dogs{closer}.dog_id)", True)):
        matcher = compiled.matcher()
        assert matcher.accept_text(prefix)
        for ch in name:
            matcher.fill_mask(bitmask, 0)
            assert unpack_bitmask(bitmask, xgr_compiler.vocab_size)[0].any()
            if not matcher.accept_text(ch):
                break
        else:
            assert accepted, name
            continue
        assert not accepted and ch == "x", (name, ch)
    # a backticked column is an operand, not a qualifier
    assert compiled.matcher().accept_text(f"{prefix}`dog_id`) = 'integer'")


@pytest.mark.parametrize("ddl,text", [
    # a bare select-list alias after FROM (the grammar reads `percentage` only as `percentage.x`)
    (TOXICOLOGY, "SELECT COUNT(*) AS percentage FROM atom AS T1 WHERE T1.element = 'c' ORDER BY percentage"),
    (TOXICOLOGY, "SELECT molecule_id, COUNT(*) AS n FROM bond GROUP BY molecule_id HAVING n > 1"),
    # SELECT / DISTINCT where the grammar has no subquery / no aggregate
    (TOXICOLOGY, "SELECT element FROM atom WHERE ROUND(SELECT"),
    (TOXICOLOGY, "SELECT element FROM atom WHERE ROUND(DISTINCT"),
    (TOXICOLOGY, "SELECT element FROM atom WHERE (DISTINCT"),
    # a column name with a space typed bare (sqlite reads `T1.Low Grade` as `T1.Low` aliased)
    (ODD, 'SELECT T1.Low FROM "order" AS T1'),
    (ODD, 'SELECT id FROM "my table" WHERE academic'),
    # a keyword where the grammar reads a FROM alias (`bond OR`), then a word ending FROM early
    (TOXICOLOGY, "SELECT T2.bond_id FROM atom AS T1 JOIN bond OR UNION"),
    # a binary NOT the grammar also reads as an alias (`x NOT FROM`): only IN / LIKE / GLOB /
    # BETWEEN may follow it, refused from the `f` (the walk over concert_singer met `NOT from`)
    (TOXICOLOGY, "SELECT T1.element NOT     from atom AS T1"),
    # a table named like a keyword typed bare (the reader reads `FROM order` as ORDER)
    (ODD, 'SELECT COUNT(DISTINCT T1."x y") AS n FROM order AS T1'),
], ids=["alias_order_by", "alias_having", "call_select", "call_distinct", "paren_distinct",
        "spaced_column", "spaced_bare", "keyword_alias", "binary_not_from", "keyword_table"])
def test_walks_that_were_dead_ends_are_refused_where_they_stray(xgr_compiler: Any, ddl: Any, text: str) -> None:
    """Each text used to reach a mask allowing nothing; now some token of it is refused, and
    the mask before that token allows others."""
    compiled = _compiled(xgr_compiler, ddl if isinstance(ddl, str) else ddl.read_text())
    matcher = compiled.matcher()
    bitmask = xgr_compiler.allocate_bitmask(1)
    for token in xgr_compiler.encode(text):
        matcher.fill_mask(bitmask, 0)
        assert unpack_bitmask(bitmask, xgr_compiler.vocab_size)[0].any()
        if not matcher.accept_token(token):
            return
    matcher.fill_mask(bitmask, 0)
    pytest.fail(f"accepted whole; the mask after it allows "
                f"{int(unpack_bitmask(bitmask, xgr_compiler.vocab_size)[0].sum())} tokens")


def test_select_and_distinct_still_open_subqueries_and_aggregates(xgr_compiler: Any) -> None:
    matcher = _compiled(xgr_compiler, TOXICOLOGY.read_text()).matcher()
    assert matcher.accept_text("SELECT T1.element FROM atom AS T1 WHERE T1.molecule_id IN (SELECT molecule_id "
                               "FROM bond WHERE bond_type = '=') AND EXISTS (SELECT * FROM molecule) "
                               "GROUP BY T1.element HAVING COUNT(DISTINCT T1.atom_id) > 1 ORDER BY "
                               "SUM(DISTINCT T1.atom_id)")
    assert matcher.can_stop()
