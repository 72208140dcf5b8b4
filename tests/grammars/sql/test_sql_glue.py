"""The glued-alias rule (grammars.sql.glue) in the scope reader and the mask layer: an alias
that a used qualifier cannot be is refused as it is typed (`singer AS T1` at the `1`, and
`T10`), an alias spelled as a query's name run on into a keyword (`T1JOINsong`) or its
beginning (`T1Jo`) is refused; real names that look like that (a table `t1_join`, `tonnage`
with a qualifier `t`) stay allowed; the co-finite piece mask equals a brute-force reading on a
small vocabulary and the token-by-token reading on the Qwen vocabulary in the new states; the
model outputs that escaped a refused alias are refused at its root; and while FROM may not
end, a FROM-ending keyword after an ON operand is refused before the grammar is stranded."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from test_sql_scope import _compiled, _mask_vs_reading, _refused_at, _tables

from grammars import spec_from_request
from grammars.sql.check import check_sql
from grammars.sql.glue import glue_prefixes, viable
from grammars.sql.grammar import FUNCTIONS
from grammars.sql.mask.vocab import SqlVocab
from grammars.sql.scope import SqlSchema, SqlScope
from tokenmask import unpack_bitmask

TABLES = {"singer": ["singer_id", "name"], "song": ["singer_id", "title"],
          "t1_join": ["id", "title"], "tonnage": ["id", "title"]}
DDL = "\n".join(f"CREATE TABLE {t} ({', '.join(f'{c} text' for c in cols)});" for t, cols in TABLES.items())

# (text, the prefix at whose last character the scope reader refuses it)
REFUSED = [
    # T1 cannot be singer (no title): refused as typed, but for the way to the table t1_join
    ("SELECT T1.title FROM singer AS T1JOINsong", "AS T1J"),
    ("SELECT T1.title FROM singer AS T10", "AS T10"),
    ("SELECT T1.title FROM singer T1", "singer T1"),  # (it cannot end: T1 unbound)
    ("SELECT T1.title FROM singer AS T1 JOIN song AS T2", "AS T1 "),
    ("SELECT T1.title FROM singer AS t1_joinx", "AS t1_joinx"),
    ("SELECT T1.title FROM singer AS t1_joi JOIN song AS T1", "AS t1_joi "),
    # glued to a keyword: where T1 would fit, or for a bound name
    ("SELECT T1.title FROM song AS T1JOINsong", "AS T1JOIN"),
    ("SELECT T1.title FROM song AS T1join", "AS T1join"),  # case-insensitive
    ("SELECT T1.title FROM song AS T1_JOIN_song", "AS T1_JOIN_"),  # the table t1_join is spared
    ("SELECT T1.title FROM song AS T1WHERE x", "AS T1WHERE"),
    ("SELECT T2.title FROM singer AS T1 JOIN song AS T2ONT1_x", "AS T2ON"),
    ("SELECT T2.title FROM singer AS T1 JOIN song AS T1LEFT", "AS T1LEFT"),  # a bound name
    ("SELECT T2.title FROM singer T1 JOIN song T2order", "T2order"),  # implicit alias
    ("SELECT T.title FROM singer AS tonnag JOIN song AS T", "AS tonnag "),  # only the real name is spared
    ("SELECT x.title FROM (SELECT title FROM song) xunion", "xunion"),  # a subquery's alias
    # stopped short of the keyword's end: refused when the alias ends
    ("SELECT T1.title FROM song AS T1Jo JOIN song AS T2", "AS T1Jo "),
    ("SELECT T1.title FROM song AS T1_ JOIN song AS T2", "AS T1_ "),
    ("SELECT T1.title FROM song AS T1o, song AS T2", "AS T1o,"),
]
ALLOWED = [
    "SELECT T1.title FROM t1_join AS T1",
    "SELECT T1.title FROM singer AS t1_join JOIN song AS T1 ON t1_join.singer_id = T1.singer_id",
    "SELECT T1.title FROM song AS T1 JOIN singer AS T1_x ON T1_x.singer_id = T1.singer_id",
    "SELECT T1.title FROM song AS T1 JOIN singer AS T10 ON T10.singer_id = T1.singer_id",
    "SELECT T1.title FROM song AS T1Jox JOIN song AS T1 ON T1Jox.singer_id = T1.singer_id",
    "SELECT T1.title, T2.name FROM singer AS T2 JOIN song AS T1 ON T2.singer_id = T1.singer_id",
    "SELECT T2.title FROM song AS T21 JOIN song AS T2 ON T21.singer_id = T2.singer_id",
    "SELECT T.title FROM singer AS tonnage JOIN song AS T ON tonnage.singer_id = T.singer_id",
    "SELECT tonnage.title, T.title FROM song AS tonnage JOIN song AS T ON tonnage.singer_id = T.singer_id",
    "SELECT T1.title FROM song AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id",
    "SELECT title FROM song AS songs JOIN singer ON songs.singer_id = singer.singer_id",  # no name used yet
]


@pytest.mark.parametrize("query,prefix", REFUSED)
def test_glued_alias_refused_as_its_keyword_completes(query: str, prefix: str) -> None:
    at = _refused_at(query, TABLES)
    assert at is not None and query[: at + 1].endswith(prefix), (at, query[: (at or 0) + 1])


@pytest.mark.parametrize("query", ALLOWED)
def test_real_names_that_look_glued_stay_allowed(query: str) -> None:
    assert _refused_at(query, TABLES) is None
    assert check_sql(query, TABLES).valid


@pytest.mark.parametrize("db,query,prefix", [
    ("singer", "SELECT T1.Title, T2.Name FROM singer AS T1JOINsong  ,  singer AS T2", "singer AS T1"),
    ("singer", "SELECT T1.Title, T2.Name FROM singer AS T1Joignsong", "singer AS T1"),
    ("course_teach", "SELECT T1.Name, T2.Course FROM teacher AS T1 JOIN course_arrange AS "
     "T2ONT1_teacher_ID        JOIN course AS T3", "course_arrange AS T2"),
])
def test_model_outputs_that_glued_a_refused_alias_are_refused_at_the_glue(db: str, query: str,
                                                                          prefix: str) -> None:
    at = _refused_at(query, _tables(db))
    assert at is not None and query[: at + 1].endswith(prefix), (at, query[: (at or 0) + 1])


def test_allowed_except_equals_a_brute_force_reading() -> None:
    words = ["T", "1", "T1", "JOIN", "join", "Join", "_", "_join", "_JOIN_", "on", "ON", "onnage",
             "ton", "song", "x", "12", "in", "ins", "where", "W", "nage", "n", "1join", "o"]
    texts = [pre + w for w in words for pre in ("", " ", "(", ".")] + ["SELECT", " ,", "''"]
    vocab = SqlVocab([t.encode() for t in texts], vocab_size=len(texts) + 5)
    prefixes = glue_prefixes(["t1", "t"])
    cases = list(itertools.product(("", " ", "(", "."), ("",)))
    cases += [("", typed) for typed in ("t", "t1", "t1_", "t1j", "t1join", "to", "ton", "tonn", "x")]
    for exceptions in (frozenset(), frozenset({"t1_join", "tonnage"})):
        for kind, typed in cases:
            mask = unpack_bitmask(torch.from_numpy(vocab.allowed_except(kind, typed, prefixes, exceptions))
                                  .unsqueeze(0), vocab.vocab_size)[0]
            for token, text in enumerate(texts):
                if vocab.kind_of[token] < 0 or vocab.kinds[vocab.kind_of[token]] != kind:
                    continue
                word = text[len(kind):].lower()
                expected = viable(typed + word, (prefixes, exceptions))
                assert bool(mask[token]) == expected, (kind, typed, text, sorted(exceptions))


# states in and around an alias slot where the glue rule applies, on real schemas and a made-up one
_STATES = [
    ("singer", "SELECT T1.Title, T2.Name FROM singer AS"),
    ("singer", "SELECT T1.Title, T2.Name FROM singer AS "),
    ("singer", "SELECT T1.Title, T2.Name FROM singer AS T"),
    ("singer", "SELECT T1.Title, T2.Name FROM singer T"),
    ("singer", "SELECT T1.Title, T2.Name FROM singer AS T2 JOIN song AS T1"),
    ("singer", "SELECT T1.Title, T2.Name FROM singer AS T2 JOIN song AS T1J"),
    ("singer", "SELECT T1.Title, T2.Name FROM singer AS T2 JOIN song AS T1_"),
    ("singer", "SELECT T1.Title, T2.Name FROM singer"),
    ("course_teach", "SELECT T1.Name, T2.Course FROM teacher AS T1 JOIN course_arrange AS T"),
    ("course_teach", "SELECT T1.Name, T2.Course FROM teacher AS T1 JOIN course AS T2O"),
    (None, "SELECT T1.title, T.title FROM singer AS t1_jo"),
    (None, "SELECT T1.title, T.title FROM singer AS to"),
    (None, "SELECT T1.title FROM song AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id"),
    # FROM may not end yet (T3 unbound): after an operand of ON only words that keep it going
    (None, "SELECT T1.title, T3.title FROM song AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id"),
    (None, "SELECT T1.title, T3.title FROM song AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id O"),
]


@pytest.mark.slow
def test_mask_equals_token_by_token_reading_in_glue_states(xgr_compiler: Any) -> None:
    bitmask = xgr_compiler.allocate_bitmask(2)
    vocab_size = xgr_compiler.vocab_size
    for db, text in _STATES:
        compiled = _compiled(xgr_compiler, db) if db else xgr_compiler.compile(
            spec_from_request({"response_format": {"type": "sql", "sql": {"schema": DDL}}}))
        matcher = compiled.matcher()
        assert matcher.accept_text(text), text
        assert _mask_vs_reading(matcher, bitmask, vocab_size) == [], text
        matcher.fill_mask(bitmask, 0)
        assert bool(unpack_bitmask(bitmask[0:1], vocab_size)[0].any())  # never a dead end


@pytest.mark.slow
def test_misfit_qualifier_and_glued_tokens_masked(xgr_compiler: Any) -> None:
    bitmask = xgr_compiler.allocate_bitmask(1)
    matcher = _compiled(xgr_compiler, "singer").matcher()
    assert matcher.accept_text("SELECT T1.Title, T2.Name FROM singer AS T")
    matcher.fill_mask(bitmask, 0)
    allowed = unpack_bitmask(bitmask, xgr_compiler.vocab_size)[0]
    one, two = (xgr_compiler.encode(t)[0] for t in ("1", "2"))
    assert not bool(allowed[one]) and bool(allowed[two])  # T1 cannot be singer, T2 can
    matcher = _compiled(xgr_compiler, "singer").matcher()
    assert matcher.accept_text("SELECT T1.Title, T2.Name FROM singer AS T2 JOIN song AS T1")
    matcher.fill_mask(bitmask, 0)
    allowed = unpack_bitmask(bitmask, xgr_compiler.vocab_size)[0]
    glue = [xgr_compiler.encode(t)[0] for t in ("JOIN", "Join", "_JOIN", "ON", "ONT")]
    assert not any(bool(allowed[t]) for t in glue)
    assert bool(allowed[xgr_compiler.encode(" ON")[0]])
    assert bool(allowed[xgr_compiler.encode("_x")[0]])  # any other alias may still be spelled (`T1_x`)


def test_scope_reader_alone_caches_blocks_per_from_state() -> None:
    schema = SqlSchema(TABLES, FUNCTIONS)
    scope = SqlScope(schema)
    assert scope.feed("SELECT T1.title FROM singer AS ")
    block = scope.word_block()
    assert block is not None and "t1join" in block[0] and "t1_on" in block[0] and "t1_join" in block[1]
    assert scope.word_block() is block
    assert scope.copy().feed("T1J") and scope.word_block() is block


@pytest.mark.parametrize("query,prefix", [
    # FROM may not end (T3 unbound): a FROM-ending keyword is refused where it parts from the
    # words that keep FROM going, not once it is spelled (the grammar then allows nothing else)
    ("SELECT T1.title, T3.title FROM song AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id "
     "ORDER BY 1", "singer_id ORD"),
    ("SELECT T1.title, T3.title FROM song AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id "
     "WHERE 1", "singer_id W"),
    ("SELECT T3.title FROM song AS T1 ORDER BY 1", "AS T1 O"),  # OUTER only follows LEFT/RIGHT/FULL
    ("SELECT T1.title, T3.title FROM song AS T1 JOIN singer AS T2 ON T2.name IS NULL ORDER BY 1",
     "NULL ORD"),
])
def test_from_ending_keyword_refused_before_it_strands_the_grammar(query: str, prefix: str) -> None:
    at = _refused_at(query, TABLES)
    assert at is not None and query[: at + 1].endswith(prefix), (at, query[: (at or 0) + 1])
