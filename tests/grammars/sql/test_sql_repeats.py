"""Repeated predicates: one predicate (its normalized text) is written at most MAX_REPEATS
times in a query (grammars.sql.repeats), in the scope reader and exactly in the token mask.
The loop met at T=0 (Spider car_1, Qwen2.5-Coder-1.5B, into max_tokens): `WHERE T1.Make =
'General Motors' OR T1.Make = 'General Motors' AND ...`, 13 times. It is refused at the first
letter of the AND / OR that would end the predicate's MAX_REPEATS + 1-th writing, and the
query can still end from there."""

from __future__ import annotations

from typing import Any

import pytest

from grammars import spec_from_request
from grammars.sql.grammar import FUNCTIONS, parse_sql_schema
from grammars.sql.repeats import MAX_REPEATS
from grammars.sql.scope import SqlSchema, SqlScope
from tests.conftest import DATA
from tests.grammars.sql.scope_reading import refused_at
from tests.grammars.sql.test_sql_scope import _mask_vs_reading
from tokenmask import unpack_bitmask

CAR_1 = (DATA / "text2sql" / "spider" / "ddl" / "car_1.sql").read_text()
HEAD = ("SELECT DISTINCT T2.Model FROM car_names AS T1 INNER JOIN model_list AS T2 ON T1.Model = "
        "T2.Model WHERE T1.Make = 'General Motors'")
LOOP = HEAD + "".join(f" {op} T1.Make = 'General Motors'" for op in ["OR", "AND"] * 7)


def _reader() -> SqlScope:
    return SqlScope(SqlSchema(parse_sql_schema(CAR_1), FUNCTIONS))


def _refused_at(text: str) -> int | None:
    return refused_at(text, parse_sql_schema(CAR_1))


def test_the_runaway_is_refused_at_the_first_letter_of_its_next_operator() -> None:
    index = _refused_at(LOOP)
    assert index is not None
    assert LOOP[: index].count("T1.Make = 'General Motors'") == MAX_REPEATS + 1
    assert LOOP[index] in "AO" and LOOP[index - 1] == " ", LOOP[index - 20: index + 1]


@pytest.mark.parametrize("text,refused", [
    # whitespace and case do not make another predicate
    (HEAD + "".join(" or t1.make='General Motors'" for _ in range(MAX_REPEATS)) + " AND", True),
    # a literal's text does: another value
    (HEAD + "".join(f" OR T1.Make = 'General Motors{i}'" for i in range(MAX_REPEATS + 2)) + " AND", False),
    # ended by `)`, `,`, the end of the text
    # (inside a bracket, from its first AND / OR: `(a OR` counts `a` only from the OR)
    ("SELECT Model FROM car_names WHERE (" + " OR ".join(["Make = 'a'"] * (MAX_REPEATS + 2)) + ")", True),
    ("SELECT Model FROM car_names WHERE " + " OR ".join(["Make = 'a'"] * (MAX_REPEATS + 1)) + ";", True),
    # BETWEEN's AND is its own
    ("SELECT Model FROM car_names WHERE " + " OR ".join(["MakeId BETWEEN 1 AND 2"] * MAX_REPEATS)
     + " OR MakeId BETWEEN 1 AND 3", False),
    # outside WHERE / ON / HAVING (a call's arguments in the select list) nothing is counted
    ("SELECT " + ", ".join(["IIF(Make = 'a' AND Model = 'b', 1, 0)"] * (MAX_REPEATS + 2)) + " FROM car_names", False),
])
def test_what_counts_as_the_same_predicate(text: str, refused: bool) -> None:
    index = _refused_at(text)
    if refused:
        assert index is not None
        assert index >= len(text) - 3, text[index - 20: index + 1]
    else:
        assert index is None
        reader = _reader()
        assert reader.feed(text) and reader.can_end()


@pytest.mark.parametrize("operator", ["=", " = ", "<>", " || ", "+"])
def test_a_capped_predicate_runs_on_into_no_operator(operator: str) -> None:
    """Refused its AND / OR, a loop may not chain a comparison instead (`= 'General Motors'
    = ...`); a predicate not written MAX_REPEATS times may."""
    capped = HEAD + " OR T1.Make = 'General Motors'" * MAX_REPEATS
    assert _refused_at(capped + operator) == len(capped) + operator.index(operator.strip()[0])
    below = HEAD + " OR T1.Make = 'General Motors'" * (MAX_REPEATS - 1)
    assert _refused_at(below + operator) is None
    reader = _reader()
    assert reader.feed(capped + " LIKE 'G%'") and reader.can_end()  # NOT / IS / IN / LIKE ... go on


def test_the_end_of_the_text_is_refused_too() -> None:
    reader = _reader()
    assert reader.feed("SELECT Model FROM car_names WHERE " + " OR ".join(["Make = 'a'"] * (MAX_REPEATS + 1)))
    assert not reader.can_end()
    assert reader.feed(" IS NULL") and reader.can_end()  # another predicate: it may end


@pytest.fixture(scope="module")
def compiled(xgr_compiler: Any) -> Any:
    return xgr_compiler.compile(spec_from_request({"response_format": {"type": "sql", "sql": {"schema": CAR_1}}}))


def test_a_greedy_repeat_loop_ends_and_the_query_can_finish(xgr_compiler: Any, compiled: Any) -> None:
    """Through the masks: the loop goes on while the mask allows its next operator, stops
    after MAX_REPEATS writings, the mask is never empty, and the query ends another way."""
    matcher = compiled.matcher()
    bitmask = xgr_compiler.allocate_bitmask(1)
    assert matcher.accept_text(HEAD)
    written = 1
    for op in ["OR", "AND"] * 7:
        tokens = xgr_compiler.encode(f" {op} T1.Make = 'General Motors'")
        if matcher.validate(tokens) != len(tokens):
            break
        assert matcher.accept_text(f" {op} T1.Make = 'General Motors'")
        written += 1
    assert written == MAX_REPEATS + 1  # the last one written cannot end
    for text in (" OR", " AND", ")", ";"):
        tokens = xgr_compiler.encode(text)
        assert matcher.validate(tokens) < len(tokens), text
    matcher.fill_mask(bitmask, 0)
    allowed = unpack_bitmask(bitmask, xgr_compiler.vocab_size)[0]
    assert allowed.any() and not any(allowed[t] for t in matcher.stop_token_ids if t < len(allowed))
    assert matcher.accept_text(" LIKE 'General%' ORDER BY T2.Model") and matcher.can_stop()


@pytest.mark.parametrize("tail", ["", " ", " T1.Make = 'General Mot", " T1.Make = 'General Motors'"])  # the last: capped
def test_the_mask_equals_token_by_token_reading_in_the_loop(xgr_compiler: Any, compiled: Any, tail: str) -> None:
    """Where a predicate was written MAX_REPEATS - 1 times and more, tokens are read one by
    one: the mask agrees with the reading (a key dropping a literal's text would not)."""
    matcher = compiled.matcher()
    prefix = HEAD + "".join(" OR T1.Make = 'General Motors'" for _ in range(MAX_REPEATS - 1)) + " OR" + tail
    assert matcher.accept_text(prefix)
    assert matcher._states[-1].predicates.near
    assert _mask_vs_reading(matcher, xgr_compiler.allocate_bitmask(2), xgr_compiler.vocab_size) == []


@pytest.mark.parametrize("prefix", [
    HEAD + "".join(f" {op} T1.Make = 'General Motors'"
                   for op in (["OR", "AND"] * MAX_REPEATS)[:MAX_REPEATS]),  # the last writing may not end
    HEAD + "".join(" OR T1.Make = 'General Motors'" for _ in range(MAX_REPEATS - 2)),  # one to go
])
def test_random_walks_in_the_loop_reach_no_dead_end(compiled: Any, prefix: str) -> None:
    from tests.grammars.sql.sql_walks import Walker, WalkReport

    walker = Walker(compiled, parse_sql_schema(CAR_1), seed=5)
    report = WalkReport()
    for _ in range(6):
        walker.walk(report, steps=40, prefix=prefix)
    assert report.dead_ends == [] and report.refused == []
    assert report.tokens > 60
