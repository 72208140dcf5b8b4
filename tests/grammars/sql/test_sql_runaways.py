"""No runaways: the scope layer bounds what no real query needs, so a degenerate greedy loop
(`UPPER(UPPER(STRFTIME('%H:%M:%S', UPPER(STRFTIME(...`, BIRD thrombosis_prediction, into
max_tokens) must end: at most MAX_CALL_DEPTH calls (functions and CAST) open at once, never a
call as the first operand of a call of the same function; whitespace runs are capped by the
grammar (SQL_MAX_WHITESPACE); a number's digits by MAX_NUMBER, one predicate's writings by
MAX_REPEATS (tests/grammars/sql/test_sql_runaway_bounds.py, test_sql_repeats.py). Measured on
every gold query of Spider dev and BIRD mini-dev: at most 4 calls open (BIRD's
`CAST(SUM(IIF(SUBSTRING(`), no such self-nesting, whitespace runs of at most 2, numbers of at
most 6 characters, one predicate written at most twice."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from grammars import spec_from_request
from grammars.sql.grammar import FUNCTIONS, SQL_MAX_WHITESPACE, parse_sql_schema
from grammars.sql.repeats import MAX_REPEATS
from grammars.sql.scope import MAX_CALL_DEPTH, MAX_NUMBER, SqlSchema, SqlScope
from tests.conftest import DATA

TEXT2SQL = DATA / "text2sql"
TOXICOLOGY = (TEXT2SQL / "bird_minidev" / "ddl" / "toxicology.sql").read_text()


def _gold() -> list[tuple[str, str]]:
    """(DDL path, query) of every gold query."""
    bird = json.loads((TEXT2SQL / "bird_minidev" / "mini_dev_sqlite.json").read_text())
    spider = json.loads((TEXT2SQL / "spider" / "dev.json").read_text())
    return ([(f"bird_minidev/ddl/{e['db_id']}.sql", e["SQL"]) for e in bird]
            + [(f"spider/ddl/{e['db_id']}.sql", e["query"]) for e in spider])


def _reader(ddl: str) -> SqlScope:
    return SqlScope(SqlSchema(parse_sql_schema(ddl), FUNCTIONS))


def test_gold_queries_stay_inside_the_bounds() -> None:
    """The bounds are above what every gold query needs (the figures in the module docstring),
    with the bound lifted: the deepest nesting read, self-nesting, the longest whitespace run,
    the longest number, the most writings of one predicate."""
    deepest, self_nested, longest, number, repeats = 0, [], 0, 0, 0
    for path, query in _gold():
        reader = _reader((TEXT2SQL / path).read_text())
        for ch in query + " ":
            reader.feed(ch)  # reading on past a refusal (a name rule) is fine for counting
            calls = [call for call in reader.calls if call]
            deepest = max(deepest, len(calls))
            if len(reader.calls) >= 2 and reader.calls[-1] and reader.calls[-1] == reader.calls[-2]:
                self_nested.append(query)
            if reader.word[:1].isdigit():
                number = max(number, len(reader.word))
        predicates = reader.predicates.ended()
        assert predicates is not None, query
        repeats = max([repeats, *predicates.counts.values()])
        longest = max([longest, *(len(run) for run in re.findall(r"\s+", query))])
    assert deepest == 4 and deepest < MAX_CALL_DEPTH
    assert self_nested == []
    assert longest == 2 and longest < SQL_MAX_WHITESPACE
    assert number == 6 and number < MAX_NUMBER
    assert repeats == 2 and repeats < MAX_REPEATS


@pytest.mark.parametrize("text,refused_in", [
    ("SELECT atom_id FROM atom WHERE UPPER(UPPER(", "UPPER("),  # after FROM: at the name's first letter
    ("SELECT UPPER(UPPER(element)) FROM atom", "UPPER("),  # before FROM: at the name's end
    ("SELECT atom_id FROM atom WHERE ROUND(ABS(LENGTH(UPPER(TRIM(LOWER(element)))))) > 1", "LOWER("),
    ("SELECT CAST(ROUND(CAST(ABS(LOWER(CAST(element AS REAL))) AS REAL)) AS TEXT) FROM atom", "CAST("),
])
def test_the_reader_refuses_past_the_bounds(text: str, refused_in: str) -> None:
    """Refused inside the last call (past the bound: its name or the character after it), not
    before."""
    start = text.rindex(refused_in)
    reader = _reader(TOXICOLOGY)
    for index, ch in enumerate(text):
        if not (reader.feed(ch) and reader.viable()):
            assert start <= index < start + len(refused_in), text[: index + 1]
            return
    pytest.fail("read whole")


def test_a_greedy_nesting_loop_ends_inside_the_bound(xgr_compiler: Any) -> None:
    """Through the matcher's masks: a walk that opens a call whenever the mask lets it (the
    degenerate greedy loop) opens at most MAX_CALL_DEPTH, then must write an operand."""
    from tokenmask import unpack_bitmask

    compiled = xgr_compiler.compile(spec_from_request(
        {"response_format": {"type": "sql", "sql": {"schema": TOXICOLOGY}}}))
    matcher = compiled.matcher()
    assert matcher.accept_text("SELECT atom_id FROM atom WHERE")
    bitmask = xgr_compiler.allocate_bitmask(1)
    opened = 0
    for _ in range(12):
        calls = [f" {name}(" for name in ("UPPER", "LOWER", "ABS", "LENGTH", "TRIM", "UPPER")]
        for call in calls:
            tokens = xgr_compiler.encode(call)
            if matcher.validate(tokens) == len(tokens):
                assert matcher.accept_text(call)
                opened += 1
                break
        else:
            break
    assert opened == MAX_CALL_DEPTH
    matcher.fill_mask(bitmask, 0)
    allowed = unpack_bitmask(bitmask, xgr_compiler.vocab_size)[0]
    assert allowed[xgr_compiler.encode("element")[0]] and not allowed[xgr_compiler.encode(" UPPER")[0]]
    assert matcher.accept_text("element" + ")" * opened + " = 'c'") and matcher.can_stop()
