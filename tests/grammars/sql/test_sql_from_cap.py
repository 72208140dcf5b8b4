"""The FROM cap: at most MAX_FROM_ITEMS items per SELECT core while FROM may end; past it an
item may start only while FROM may not end yet, and must then bind what FROM lacks (a
qualifier used before FROM, or a table for a bare column), so a JOIN loop ends. The loop met
at T=0 (Spider battle_death, Qwen2.5-Coder-1.5B, into max_tokens): `SELECT ship.id, ship.name
FROM death AS T1 JOIN ship AS T2 ON ... JOIN battle AS T3 ON ... JOIN battle AS T11 ON T10.id
=`: `ship` never bound, so FROM could not end and every JOIN was allowed. It is now refused at
the `T` of `T9`, where the alias can only be `ship`; with FROM able to end, a 9th item is
refused at the first letter of its JOIN (after an alias or an ON operand) or at its `,`."""

from __future__ import annotations

from typing import Any

import pytest

from grammars import spec_from_request
from grammars.sql.grammar import FUNCTIONS, parse_sql_schema
from grammars.sql.scope import MAX_FROM_ITEMS, SqlSchema, SqlScope
from tests.conftest import DATA
from tests.grammars.sql.scope_reading import refused_at
from tokenmask import unpack_bitmask

BATTLE_DEATH = (DATA / "text2sql" / "spider" / "ddl" / "battle_death.sql").read_text()
HEAD = ("SELECT ship.id, ship.name FROM death AS T1 JOIN ship AS T2 ON T1.caused_by_ship_id = T2.id "
        "JOIN battle AS T3 ON T2.lost_in_battle = T3.id")
LOOP = HEAD + "".join(f" JOIN battle AS T{i} ON T{i - 1}.id = T{i}.id" for i in range(4, 12))
RESOLVED = HEAD.replace("ship.id, ship.name", "T2.id, T2.name")


def _reader() -> SqlScope:
    return SqlScope(SqlSchema(parse_sql_schema(BATTLE_DEATH), FUNCTIONS))


def _refused_at(text: str) -> int | None:
    return refused_at(text, parse_sql_schema(BATTLE_DEATH))


def test_the_runaway_is_refused_at_the_alias_past_the_cap() -> None:
    index = _refused_at(LOOP)
    assert index is not None
    assert LOOP[:index].endswith("JOIN battle AS "), LOOP[index - 30: index + 1]
    assert LOOP[index:].startswith(f"T{MAX_FROM_ITEMS + 1} ")
    reader = _reader()
    assert reader.feed(LOOP[:index] + "ship ON T8.id = ship.id") and reader.can_end()


@pytest.mark.parametrize("tail,refused", [
    (" JOIN battle AS T9 ON T8.id = T9.id", "J"),  # after an ON operand: refused at its first letter
    (", battle AS T9", ","),
    (" WHERE T1.id = 1", None),
])
def test_with_from_able_to_end_no_item_past_the_cap(tail: str, refused: str | None) -> None:
    text = RESOLVED + "".join(f" JOIN battle AS T{i} ON T{i - 1}.id = T{i}.id" for i in range(4, MAX_FROM_ITEMS + 1))
    assert _refused_at(text) is None
    index = _refused_at(text + tail)
    if refused is None:
        assert index is None
    else:
        assert index == len(text) + tail.index(refused)
    # comma items: refused at the JOIN after the last alias, at its first letter
    commas = "SELECT T1.id FROM " + ", ".join(f"battle AS T{i}" for i in range(1, MAX_FROM_ITEMS + 1))
    assert _refused_at(commas) is None
    assert _refused_at(commas + " JOIN battle") == len(commas) + 1


def test_past_the_cap_a_bare_column_is_bound_by_a_table_holding_it() -> None:
    text = "SELECT tonnage FROM " + ", ".join(f"battle AS T{i}" for i in range(1, MAX_FROM_ITEMS + 1))
    assert _refused_at(text + ", death AS d WHERE") == len(text) + 2  # no death.tonnage: the table's first letter
    reader = _reader()
    assert reader.feed(text + ", ship AS d") and reader.can_end()


def test_the_gold_maximum_is_below_the_cap() -> None:
    from tests.grammars.sql.test_sql_runaways import TEXT2SQL, _gold

    most = 0
    for path, query in _gold():
        reader = SqlScope(SqlSchema(parse_sql_schema((TEXT2SQL / path).read_text()), FUNCTIONS))
        for ch in query + " ":
            reader.feed(ch)  # reading on past a refusal (a name rule) is fine for counting
            most = max([most, *(scope.items for scope in reader.scopes)])
    assert most == 4 and most < MAX_FROM_ITEMS


@pytest.fixture(scope="module")
def compiled(xgr_compiler: Any) -> Any:
    return xgr_compiler.compile(spec_from_request({"response_format": {"type": "sql", "sql": {"schema": BATTLE_DEATH}}}))


def _allowed(xgr_compiler: Any, matcher: Any) -> Any:
    bitmask = xgr_compiler.allocate_bitmask(1)
    matcher.fill_mask(bitmask, 0)
    return unpack_bitmask(bitmask, xgr_compiler.vocab_size)[0]


@pytest.mark.parametrize("head,finish", [
    (HEAD, " JOIN battle AS ship ON T8.id = ship.id"),  # FROM may not end: the alias must bind `ship`
    (RESOLVED, None),  # FROM may end: no item past the cap
])
def test_a_greedy_join_loop_ends_and_the_query_can_finish(xgr_compiler: Any, compiled: Any,
                                                         head: str, finish: str | None) -> None:
    """Through the masks: the loop joins while the mask lets it, stops at the cap, the mask
    is never empty there, and the query then ends."""
    matcher = compiled.matcher()
    assert matcher.accept_text(head)
    items = 3
    for i in range(4, 16):
        step = f" JOIN battle AS T{i} ON T{i - 1}.id = T{i}.id"
        tokens = xgr_compiler.encode(step)
        accepted = matcher.validate(tokens)
        if accepted != len(tokens):  # refused inside this step: the mask before it allows others
            assert all(matcher.accept_token(token) for token in tokens[:accepted])
            assert _allowed(xgr_compiler, matcher).any()
            assert not _allowed(xgr_compiler, matcher)[tokens[accepted]]
            matcher.rollback(accepted)
            break
        assert matcher.accept_text(step)
        items += 1
    if finish is None:
        assert items == MAX_FROM_ITEMS
        assert matcher.accept_text(" WHERE T1.id = 1") and matcher.can_stop()
    else:
        assert items == MAX_FROM_ITEMS and matcher.accept_text(finish) and matcher.can_stop()


_EIGHT = "".join(f" JOIN battle AS T{i} ON T{i - 1}.id = T{i}.id" for i in range(4, MAX_FROM_ITEMS + 1))


@pytest.mark.parametrize("prefix", [
    HEAD + _EIGHT + " JOIN",  # past the cap: the tables that can bind `ship`
    HEAD + _EIGHT + " JOIN battle",  # AS or `ship`
    HEAD + _EIGHT + " JOIN battle AS",
    HEAD + _EIGHT + " JOIN ship",  # `ship` binds itself: the keywords after it too
    RESOLVED + _EIGHT,  # at the cap after an ON operand
    RESOLVED + _EIGHT + " ",
    "SELECT T1.id FROM " + ", ".join(f"battle AS T{i}" for i in range(1, MAX_FROM_ITEMS + 1)),
    "SELECT T1.id FROM " + ", ".join(f"battle AS T{i}" for i in range(1, MAX_FROM_ITEMS)) + ", battle",
])
def test_the_mask_equals_token_by_token_reading_at_the_cap(xgr_compiler: Any, compiled: Any, prefix: str) -> None:
    from tests.grammars.sql.test_sql_scope import _mask_vs_reading

    matcher = compiled.matcher()
    assert matcher.accept_text(prefix)
    assert _mask_vs_reading(matcher, xgr_compiler.allocate_bitmask(2), xgr_compiler.vocab_size) == []
    assert _allowed(xgr_compiler, matcher).any()


@pytest.mark.parametrize("prefix", [
    HEAD + _EIGHT,  # past the cap, `ship` still to bind
    RESOLVED + _EIGHT,  # at the cap, FROM may end
    "SELECT T1.id FROM " + ", ".join(f"battle AS T{i}" for i in range(1, MAX_FROM_ITEMS)) + ", battle",
    "SELECT tonnage, T9.name FROM " + ", ".join(f"battle AS T{i}" for i in range(1, MAX_FROM_ITEMS + 1)),
], ids=["unbound", "resolved", "commas", "bare_and_qualifier"])
def test_random_walks_from_the_cap_reach_no_dead_end(compiled: Any, prefix: str) -> None:
    from tests.grammars.sql.sql_walks import Walker, WalkReport

    walker = Walker(compiled, parse_sql_schema(BATTLE_DEATH), seed=3)
    report = WalkReport()
    for _ in range(6):
        walker.walk(report, steps=40, prefix=prefix)
    assert report.dead_ends == [] and report.refused == []
    assert report.tokens > 60
