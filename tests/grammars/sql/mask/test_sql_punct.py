"""Punctuation kinds (grammars.sql.mask.punct): each text's kind, and every kind's verdict against
token-by-token readings of SqlScope, at every character of Spider gold queries and at states
built to hit each rule (a word whose end is refused, `Q.`, a closed quoted name, FROM's
commas and names, a subquery's `)`, `;`)."""

from __future__ import annotations

import collections
import random
from typing import Any

import pytest

from grammars.sql.grammar import FUNCTIONS
from grammars.sql.mask.punct import (
    CHECKED,
    CLOSER,
    COMMA,
    FLAGS,
    LEAD_DOT,
    LEAD_DOT0,
    LEAD_OTHER,
    LEAD_SEMI,
    LEAD_STAR,
    RPAREN,
    checked_kinds,
    known_names,
    open_tail,
    punctuation_kind,
    punctuation_verdicts,
)
from grammars.sql.scope import SqlSchema, SqlScope
from tests.grammars.sql.test_sql_scope import _compiled, _gold, _tables


@pytest.mark.parametrize("text,kind", [
    ('="', LEAD_OTHER * FLAGS + CHECKED),  # any quoted name opening: read as typed where checked
    ("),\n", LEAD_OTHER * FLAGS + RPAREN + COMMA),
    ("(*)", LEAD_OTHER * FLAGS),  # its `)` closes the bracket it opened
    ("(,", LEAD_OTHER * FLAGS),  # a comma inside a bracket the text opened
    ("),(", LEAD_OTHER * FLAGS + RPAREN + COMMA),
    (' ""', LEAD_OTHER * FLAGS + CHECKED + CLOSER),
    ('"a")', LEAD_OTHER * FLAGS + CHECKED + CLOSER + RPAREN),
    ("'x;y,)'", LEAD_OTHER * FLAGS),  # a string's content is never read
    ("'", LEAD_OTHER * FLAGS),
    (" ;\n", LEAD_SEMI * FLAGS),
    (".,", LEAD_DOT0 * FLAGS + COMMA),
    (" .", LEAD_DOT * FLAGS),
    (" *(", LEAD_STAR * FLAGS),
    ("，", LEAD_OTHER * FLAGS),  # non-ASCII: read as an operator
    ("([T", LEAD_OTHER * FLAGS + CHECKED),  # a bracketed name opens: read as typed after FROM
    (" `x`)", LEAD_OTHER * FLAGS + CHECKED + CLOSER + RPAREN),
    ('"[x', LEAD_OTHER * FLAGS + CHECKED),  # a `[` inside a double-quoted name is its text
    ('"a".', -1),  # a qualifier: its name is read
    ("a=", -1),
    (");", -1),
    ("; x", -1),
    ("", -1),
    (" \n", -1),
])
def test_punctuation_kind(text: str, kind: int) -> None:
    assert punctuation_kind(text) == kind


def _texts_by_kind(vocab: Any, *, per_kind: int | None, rng: random.Random) -> dict[int, list[str]]:
    kinds: dict[int, list[str]] = collections.defaultdict(list)
    for token_id, kind in enumerate(vocab.punct_kind.tolist()):
        if kind >= 0:
            kinds[kind].append(vocab.text[token_id])
    if per_kind is None:  # all, but kind 0 (~55k, mostly non-ASCII text) sampled
        kinds[0] = rng.sample(kinds[0], 3000)
    else:
        kinds = collections.defaultdict(list, {kind: rng.sample(texts, min(per_kind, len(texts)))
                                               for kind, texts in kinds.items()})
    return kinds


def _wrong_verdicts(scope: SqlScope, texts: dict[int, list[str]], fired: collections.Counter[str]) -> list[str]:
    accepted, refused = punctuation_verdicts(scope)
    assert not accepted & refused
    wrong = []
    for kinds, verdict in ((accepted, True), (refused, False)):
        for kind in kinds:
            for text in texts.get(kind, ()):
                probe = scope.copy()
                if (probe.feed(text) and probe.viable()) != verdict:
                    wrong.append(text)
                fired["accepted" if verdict else "refused"] += 1
    fired["word" if scope.word else "qual" if scope.qual else "pending" if scope.pending is not None else
          "settled"] += bool(accepted or refused)
    return wrong


def test_verdicts_equal_readings_at_every_character_of_gold_queries(xgr_compiler: Any) -> None:
    rng = random.Random(0)
    vocab = _compiled(xgr_compiler, "concert_singer").matcher().vocab
    texts = _texts_by_kind(vocab, per_kind=6, rng=rng)
    fired: collections.Counter[str] = collections.Counter()
    gold = _gold()
    for example in gold[::25]:
        scope = SqlScope(SqlSchema(_tables(example["db_id"]), FUNCTIONS))
        query = example["query"]
        for index, ch in enumerate(query):
            assert _wrong_verdicts(scope, texts, fired) == [], query[:index]
            assert scope.feed(ch)
    assert fired["accepted"] > 20_000 and fired["refused"] > 1_000, fired
    assert fired["word"] and fired["qual"] and fired["settled"], fired


# texts no token holds, each meeting two rules in one text
_BEYOND_VOCABULARY = [',"singer",', ' , "singer" ,', '),', ') ,', '"T1",', ' "" ,', '(),', ',,', ', ,"x"',
                      '"singer" "s",', '),(', '"x")']


@pytest.mark.parametrize("prefix", [
    "SELECT nam",  # a bare column before FROM: any word ends well
    "SELECT name FROM sing",  # not a table: every text after it refused
    "SELECT name FROM singer",  # a table: `,` binds it
    "SELECT name FROM singer WHERE nam",  # not a column of singer
    "SELECT T1.",  # `*` or a quoted column after a qualifier: other leads read one by one
    "SELECT T1.Name FROM singer AS T1 WHERE T1.",
    "SELECT T1.Name FROM singer AS T2",  # T1 unbound: FROM cannot end, `;` refused
    'SELECT "T1"',  # a quoted name closed, not yet known as a qualifier
    'SELECT name FROM "singer"',
    "SELECT name FROM singer AS",  # an alias slot: a quoted name closing there is read
    'SELECT "".Year FROM stadium AS',  # ... and ` ""` refused: the alias "" must have Year
    'SELECT "".Year FROM stadium',
    "SELECT name FROM singer ,",
    "SELECT count(*) FROM singer , singer",  # bound twice: `,` refused (and `;`, `)`)
    "SELECT count(*) FROM singer , singer (",  # `),` binds singer again: refused past the `)`
    "SELECT name FROM singer , concert AS c",  # `,"singer",`: the second `,` binds singer again
    "SELECT name FROM singer AS T1 JOIN concert AS T2 ON T1.Singer_ID = T2.concert_ID",
    "SELECT name FROM singer WHERE Singer_ID IN (SELECT Singer_ID FROM singer_in_concert",
    "SELECT name FROM singer WHERE Singer_ID IN (SELECT T1.Singer_ID FROM singer_in_concert AS T2",
    "SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)",
    "SELECT count(*) FROM (SELECT name FROM singer",
    "SELECT name FROM singer UNION SELECT name FROM singer",
    "SELECT 1.",  # a decimal point
    "SELECT name AS n FROM singer ORDER BY n",
    "SELECT name FROM singer AS T1 WHERE T1.Age = ",  # a `[` / `` ` `` name is checked as typed
    "SELECT name FROM singer AS T1 JOIN concert AS T2 ON (",
    "SELECT name FROM singer WHERE Singer_ID IN (SELECT Singer_ID FROM singer_in_concert) AND (",
    "SELECT name FROM singer JOIN",  # a quoted table is checked as typed: singer would be ambiguous
])
def test_verdicts_equal_readings_for_every_text_at_built_states(xgr_compiler: Any, prefix: str) -> None:
    vocab = _compiled(xgr_compiler, "concert_singer").matcher().vocab
    texts = _texts_by_kind(vocab, per_kind=None, rng=random.Random(1))
    for text in _BEYOND_VOCABULARY:
        texts[punctuation_kind(text)].append(text)
    scope = SqlScope(SqlSchema(_tables("concert_singer"), FUNCTIONS))
    assert scope.feed(prefix)
    fired: collections.Counter[str] = collections.Counter()
    assert _wrong_verdicts(scope, texts, fired) == []
    # after a qualifier only `;` and the `*` texts are decided (a quoted column is read)
    assert fired["accepted"] + fired["refused"] > (150 if prefix.endswith("T1.") else 500)


def test_nothing_is_decided_inside_a_literal_or_after_the_end() -> None:
    scope = SqlScope(SqlSchema(_tables("concert_singer"), FUNCTIONS))
    for text in ("SELECT name FROM singer WHERE name = 'x", ";"):
        assert scope.feed(text)
        assert punctuation_verdicts(scope) == (frozenset(), frozenset())


@pytest.mark.parametrize("prefix", [
    "SELECT name FROM singer AS",  # an alias slot
    "SELECT name FROM singer",  # after a table: an alias or what ends the item
    "SELECT T1.Name FROM singer AS T1 JOIN concert AS",
    'SELECT "_".Year FROM stadium AS',  # "_" is required to have Year: not fresh
    'SELECT T1.Name FROM singer AS "T1" JOIN concert AS',  # "t1" bound: not fresh
])
def test_mask_reads_one_text_for_all_closing_a_fresh_name(xgr_compiler: Any, prefix: str, monkeypatch: Any) -> None:
    # a punctuation token closing one quoted name no rule compares (sql_punct.known_names)
    # reads like any other closing a fresh name with its opaque shape: one reading per shape;
    # the mask still equals the token-by-token reading, names the query uses included
    from grammars.sql.mask import matcher as sql_scope_matcher
    from tests.grammars.sql.test_sql_scope import _mask_vs_reading

    decided_fresh = []
    read_fresh = sql_scope_matcher.ScopedSqlMatcher._read_fresh

    def spy(self: Any, ids: Any, *args: Any) -> Any:
        rest, reads = read_fresh(self, ids, *args)
        decided_fresh.append(len(ids) - len(rest))
        return rest, reads

    monkeypatch.setattr(sql_scope_matcher.ScopedSqlMatcher, "_read_fresh", spy)
    matcher = _compiled(xgr_compiler, "concert_singer").matcher()
    matcher.forget()
    assert all(matcher.accept_token(t) for t in xgr_compiler.encode(prefix))
    assert _mask_vs_reading(matcher, xgr_compiler.allocate_bitmask(2), xgr_compiler.vocab_size) == []
    assert sum(decided_fresh) > 10


def test_known_names_hold_the_names_a_reading_tells_apart() -> None:
    scope = SqlScope(SqlSchema(_tables("concert_singer"), FUNCTIONS))
    assert scope.feed("SELECT T1.Year FROM stadium AS")  # an alias slot; T1 must have Year
    known = known_names(scope)

    def reads(name: str) -> bool:
        probe = scope.copy()
        return probe.feed(f' "{name}"') and probe.viable()

    for name in ("select", "t1"):  # a keyword; a qualifier whose columns stadium lacks
        assert name in known and not reads(name)
    for name in ("zz", "", "-"):
        assert name not in known and reads(name)
    assert {"stadium", "capacity", "count"} <= known  # a table, a column, a function


@pytest.mark.parametrize("prefix", [
    "SELECT name FROM singer AS T1 WHERE T1.Age = ",
    "SELECT name FROM singer AS T1 JOIN concert AS T2 ON (",
    "SELECT name FROM singer WHERE Singer_ID IN (SELECT Singer_ID FROM singer_in_concert AS s WHERE (",
    "SELECT name FROM singer GROUP BY name HAVING count(",
])
def test_checked_kinds_equal_readings_of_texts_ending_inside_a_name(xgr_compiler: Any, prefix: str) -> None:
    """After FROM a text ending inside its `[` / `` ` `` name is accepted iff the name's text
    is a prefix of a name in scope (or, backticked, of a column): every such token of the
    vocabulary, and texts beyond it, against token-by-token readings."""
    vocab = _compiled(xgr_compiler, "concert_singer").matcher().vocab
    scope = SqlScope(SqlSchema(_tables("concert_singer"), FUNCTIONS))
    assert scope.feed(prefix)
    kinds, names = checked_kinds(scope)
    assert kinds and set(names) == {"[", "`"}
    texts = [text for text in vocab.text if open_tail(text) is not None]
    texts += ["[t1", " [T", "`singer_i", "(`Nam", "[S", "[singer", "`é", "[", "`"]
    seen = collections.Counter()
    for text in texts:
        if punctuation_kind(text) not in kinds:
            continue
        opener, tail = open_tail(text) or ("", "")
        verdict = tail.isascii() and tail.lower() in names[opener].prefixes
        probe = scope.copy()
        assert (probe.feed(text) and probe.viable()) == verdict, text
        seen[verdict] += 1
    assert seen[True] >= 5 and seen[False] > 100, seen
