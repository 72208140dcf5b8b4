"""Names sqlite would not resolve, refused where they are typed (grammars.sql.scope, grammars.sql.glue):
a quoted column after a qualifier that the qualifier's table lacks, a bare column two tables in
scope hold (ambiguous), a FROM alias that runs a keyword on into a name (`cards WHERElanguage`),
and a bare column in a subquery's GROUP BY / ORDER BY that only an enclosing query holds.

The model answers below were accepted by the grammar and refused by sqlite (BIRD mini-dev
schemas); each is now refused at the character shown, with a token allowed at every position
before it (no dead end on the way)."""

from __future__ import annotations

from typing import Any

import pytest

from grammars import spec_from_request
from grammars.sql.check import check_sql
from grammars.sql.grammar import parse_sql_schema
from tests.conftest import DATA
from tests.grammars.sql.scope_reading import refused_at
from tokenmask import unpack_bitmask

BIRD = DATA / "text2sql" / "bird_minidev" / "ddl"

# (db, an answer sqlite refused, the prefix at whose last character the reader refuses it)
ANSWERS = [
    # `Q."col"` / `` Q.`col` ``: frpm has no aVGScrRead / NumGE1500 (satscores has)
    ("california_schools", 'SELECT T1.Street, T1.City, T1.Zip, T1.State FROM schools AS T1 INNER JOIN frpm AS '
     'T2 ON T1.CDSCode = T2.CDSCode ORDER BY T2."aVGScrRead" / T2."NumTstTakr" ASC LIMIT 1',
     'ORDER BY T2."aV'),
    ("california_schools", "SELECT T1.Street, T1.City, T1.Zip, T1.State FROM schools AS T1 INNER JOIN frpm AS "
     "T2 ON T1.CDSCode = T2.CDSCode ORDER BY T2.`NumGE1500` ASC LIMIT 1", "ORDER BY T2.`Nu"),
    # a keyword glued to a name read as an AS-less alias, then an ambiguous column
    ("card_games", "SELECT name FROM cards WHERElanguage INNER JOIN set_translations ON "
     "set_translations.setCode = SETCODE WHERE set_translations.language = 'Italian'", "FROM cards WHEREl"),
    ("european_football_2", "SELECT overall_rating FROM Player_Attributes WHEREOverall_rating , "
     "`team_attributes` AS T2 INNER JOIN Player_Attributes AS T3 ON T2.team_api_id = T3.id",
     "FROM Player_Attributes WHEREO"),
    ("card_games", "SELECT name, format FROM cards WHEREedhrecRank , `cardS` AS `cardS` INNER JOIN legalities "
     "ON legalities.uuid = cardS.uuid", "FROM cards WHERE"),  # FROM may not end (format): WHERE refused
    # connected has no molecule_id; a subquery's GROUP BY does not reach atom's
    ("toxicology", "SELECT molecule_id FROM atom WHERE molecule_id IN (SELECT molecule_id FROM connected WHERE "
     "bond_id IN (SELECT bond_id FROM bond WHERE bond_type = '-') GROUP BY molecule_id HAVING COUNT(*) = 1) "
     "AND molecule_id NOT IN (SELECT molecule_id FROM molecule WHERE label = '-') ORDER BY molecule_id LIMIT 3",
     "GROUP BY mo"),
    # the same answers without the glue: the ambiguous names themselves
    ("card_games", "SELECT name FROM cards INNER JOIN set_translations ON set_translations.setCode = SETCODE",
     "= SETC"),
    ("european_football_2", "SELECT overall_rating FROM Player_Attributes , `team_attributes` AS T2 INNER JOIN "
     "Player_Attributes AS T3 ON T2.team_api_id = T3.id", "INNER JOIN Player_"),
    ("card_games", "SELECT name, format FROM cards , `cardS` AS `cardS` INNER JOIN legalities ON "
     "legalities.uuid = cardS.uuid", ", `c"),
]


def _tables(db: str) -> dict[str, list[str]]:
    return parse_sql_schema((BIRD / f"{db}.sql").read_text())


def _refused_at(query: str, tables: dict[str, list[str]]) -> int | None:
    """Index of the character the scope reader refuses (len(query) when it cannot end)."""
    return refused_at(query, tables, must_end=True)


@pytest.mark.parametrize("db,query,prefix", ANSWERS)
def test_answers_sqlite_refused_are_refused_where_the_name_goes_wrong(db: str, query: str, prefix: str) -> None:
    tables = _tables(db)
    assert not check_sql(query, tables).valid
    at = _refused_at(query, tables)
    assert at is not None and query[: at + 1].endswith(prefix), (at, query[: (at or 0) + 1])


@pytest.mark.slow
@pytest.mark.parametrize("db,query,prefix", ANSWERS[:6])
def test_answers_refused_by_the_mask_with_a_token_at_every_step(xgr_compiler: Any, db: str, query: str,
                                                                prefix: str) -> None:
    """Fed one character at a time to the schema-aware matcher: the mask allows some token
    at every position, and the text is refused at the prefix's last character."""
    spec = spec_from_request({"response_format": {"type": "sql", "sql": {"schema": (BIRD / f"{db}.sql").read_text()}}})
    matcher = xgr_compiler.compile(spec).matcher()
    bitmask = xgr_compiler.allocate_bitmask(1)
    for index, ch in enumerate(query):
        matcher.fill_mask(bitmask, 0)
        assert unpack_bitmask(bitmask, xgr_compiler.vocab_size)[0].any(), query[:index]
        if not matcher.accept_text(ch):
            assert query[: index + 1].endswith(prefix), query[: index + 1]
            return
    pytest.fail("accepted whole")


TOY = {"a": ["id", "name", "x"], "b": ["id", "name", "y"], "c": ["z"]}


@pytest.mark.parametrize("query", [
    "SELECT a.name AS name FROM a JOIN b ON a.id = b.id ORDER BY name",  # an alias in ORDER BY
    "SELECT name FROM a NATURAL JOIN b",  # NATURAL: the shared columns are one
    "SELECT x FROM a JOIN c ON z = x WHERE z IS NULL OR id IN (SELECT id FROM b)",
    "SELECT x FROM a WHERE x IN (SELECT y FROM b WHERE x = y) OR EXISTS (SELECT 1 FROM c WHERE z = x)",
    "SELECT id FROM a WHERE id IN (SELECT id FROM b, c)",  # the innermost scope decides: b's id
    "SELECT t.id FROM (SELECT id FROM a) AS t JOIN b ON t.id = b.id WHERE y = 1",  # y: b's (or t's)
    "SELECT y FROM b WHERE y IN (SELECT x FROM a GROUP BY x HAVING y > 1)",  # HAVING reaches b
    "SELECT id FROM a JOIN c ON z = 1",  # c holds no id
])
def test_names_sqlite_resolves_stay_allowed(query: str) -> None:
    assert check_sql(query, TOY).valid, query
    assert _refused_at(query, TOY) is None, query


@pytest.mark.parametrize("query,prefix", [
    ("SELECT x FROM a JOIN b ON id = 1", "ON id"),  # ambiguous in ON
    ("SELECT x FROM a JOIN b ON a.id = b.id WHERE name = 'n'", "WHERE na"),  # refused as typed: no name in scope starts so
    ("SELECT a.name AS name FROM a JOIN b GROUP BY name", "GROUP BY na"),  # an alias only in ORDER BY
    ("SELECT x FROM a JOIN b ON x = 1 JOIN b AS b2 ON y = 1", "ON y"),  # bound twice: ambiguous
    ("SELECT name FROM a JOIN b", "JOIN b"),  # before FROM: b may not be bound too
    ("SELECT name FROM a JOIN c JOIN \"b\"", 'JOIN "b'),  # quoted, as it is typed
    ("SELECT x FROM a JOIN b ON x = 1 JOIN c ON id = 1", "ON id"),  # ON's own scope
    ("SELECT z, id FROM c JOIN a JOIN", "c JOIN a JOIN"),  # no table may follow, FROM may end
    ("SELECT z, id FROM c JOIN a AS t ,", "AS t ,"),
    ("SELECT z, id FROM c JOIN a AS t ON z = 1 LEFT", "ON z = 1 LE"),
    ("SELECT id FROM a WHERE x IN (SELECT z FROM c ORDER BY x)", "ORDER BY x"),  # ORDER BY: local
    ("SELECT id FROM a AS t WHERE x IN (SELECT z FROM c GROUP BY t.id)", "GROUP BY t."),
    ('SELECT t."w" FROM a AS t', 't."w'),  # before FROM too: no table has w
    ('SELECT t."y" FROM a AS t', "FROM a AS t"),  # t requires y: a cannot be t
    ('SELECT t."y", t.x FROM b AS t', ", t.x"),  # no table has both
    ("SELECT t.`zz` FROM c AS t", "t.`zz"),
    ("SELECT name FROM a JOINb", "FROM a JOINb"),  # a keyword glued to a name: no alias
    ("SELECT name FROM a WHERE_x", "FROM a WHERE_"),
])
def test_names_sqlite_refuses_are_refused_where_typed(query: str, prefix: str) -> None:
    at = _refused_at(query, TOY)
    assert at is not None and query[: at + 1].endswith(prefix), (at, query[: (at or 0) + 1])


CLOSED = "SELECT Name, Stadium_ID, concert_ID, Singer_ID FROM singer JOIN concert"  # every table holds one


@pytest.mark.slow
@pytest.mark.parametrize("prefix", [
    "SELECT Name FROM singer JOIN ",  # stadium holds Name: refused as a word and quoted
    'SELECT Name FROM singer JOIN "',
    "SELECT Name FROM singer JOIN `co",
    "SELECT Name FROM singer ,",
    "SELECT Name FROM singer",  # an AS-less alias may not start with a keyword and go on
    'SELECT T1."',  # a quoted column after a qualifier: read as typed
    'SELECT T1.Name FROM singer AS T1 WHERE T1."',
    "SELECT T1.Name FROM singer AS T1 WHERE T1.`Na",
    "SELECT T1.Name FROM singer AS T1 JOIN stadium AS T2 WHERE ",  # Name is ambiguous
    "SELECT Name FROM singer WHERE Singer_ID IN (SELECT Singer_ID FROM singer_in_concert GROUP BY ",
    f"{CLOSED} ",  # no table may follow: no join, no `,`
    f"{CLOSED} AS c ",
    f"{CLOSED} AS c ON c.Year = 1 ",
])
def test_mask_equals_token_by_token_reading_where_names_are_judged(xgr_compiler: Any, prefix: str) -> None:
    from tests.grammars.sql.test_sql_scope import _compiled, _mask_vs_reading

    matcher = _compiled(xgr_compiler, "concert_singer").matcher()
    assert matcher.accept_text(prefix)
    assert _mask_vs_reading(matcher, xgr_compiler.allocate_bitmask(2), xgr_compiler.vocab_size) == []
