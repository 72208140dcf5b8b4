"""The word caps: an identifier or keyword word is at most `max_word` = max(MAX_WORD, the
schema's longest name) characters, a word starting with a digit (a number's digits) at most
MAX_NUMBER, in the scope reader and exactly in the token mask (a token that would carry the
word past the cap is refused, one ending it is not), with no dead end at the cap. A greedy
loop met at T=0 (BIRD european_football_2, Qwen2.5-Coder-1.5B) ran an identifier into the
word cap, then wrote a digit run to max_tokens."""

from __future__ import annotations

from typing import Any

import pytest

from grammars import spec_from_request
from grammars.sql.grammar import FUNCTIONS, parse_sql_schema
from grammars.sql.scope import MAX_NUMBER, MAX_WORD, SqlSchema, SqlScope

LONG = "x" * 90  # a schema name longer than MAX_WORD
DDL = f"CREATE TABLE atom (atom_id TEXT, element TEXT, {LONG} INTEGER);"


def _reader() -> SqlScope:
    return SqlScope(SqlSchema(parse_sql_schema(DDL), FUNCTIONS))


def test_max_word_is_the_longest_schema_name() -> None:
    assert _reader().schema.max_word == 90 > MAX_WORD
    plain = SqlSchema(parse_sql_schema("CREATE TABLE a (b INT);"), FUNCTIONS)
    assert plain.max_word == MAX_WORD


def test_the_reader_caps_a_word_and_a_number() -> None:
    reader = _reader()
    assert reader.feed(f"SELECT {LONG} FROM atom") and reader.can_end()
    alias = "a" * 90
    reader = _reader()
    assert reader.feed(f"SELECT element {alias}") and reader.viable()
    assert not reader.feed("a")
    digits = "1" * MAX_NUMBER
    for number in (digits, f"{digits}.{digits}", f"1.5e{'1' * (MAX_NUMBER - 2)}", f"{digits[1:]}e+{digits}"):
        assert _reader().feed(f"SELECT {number} FROM atom"), number
    for number in (digits + "1", f"1.{digits}1", f"1.5e{'1' * (MAX_NUMBER - 1)}", f"1e+{digits}1"):
        reader = _reader()
        assert reader.feed("SELECT atom_id FROM atom WHERE element = ")
        assert not reader.feed(number), number


def test_the_runaway_digit_run_is_refused_at_the_cap() -> None:
    """The loop's digits, as a number: refused at the digit past MAX_NUMBER."""
    reader = _reader()
    assert reader.feed("SELECT atom_id FROM atom WHERE element > 1")
    typed = 1
    while reader.feed("0"):
        typed += 1
    assert typed == MAX_NUMBER


@pytest.fixture(scope="module")
def compiled(xgr_compiler: Any) -> Any:
    return xgr_compiler.compile(spec_from_request({"response_format": {"type": "sql", "sql": {"schema": DDL}}}))


def _allowed(xgr_compiler: Any, matcher: Any) -> Any:
    from tokenmask import unpack_bitmask

    bitmask = xgr_compiler.allocate_bitmask(1)
    matcher.fill_mask(bitmask, 0)
    return unpack_bitmask(bitmask, xgr_compiler.vocab_size)[0]


@pytest.mark.parametrize("left", [0, 1, 3, 7])
def test_the_mask_is_exact_at_the_cap(xgr_compiler: Any, compiled: Any, left: int) -> None:
    """An alias `left` characters short of the cap: every word-piece token the mask allows
    is accepted, those it refuses (a sample across word lengths) are refused by the matcher,
    and the word can still end."""
    matcher = compiled.matcher()
    assert matcher.accept_text("SELECT element " + "a" * (90 - left))
    allowed = _allowed(xgr_compiler, matcher)
    vocab = matcher.vocab
    kind = vocab.kinds.index("")
    pieces = [i for i in range(len(vocab.text)) if vocab.kind_of[i] == kind and vocab.word_len[i]]
    by_len: dict[tuple[int, bool], int] = {}  # a digit continues the word: it counts too
    for token_id in pieces:
        by_len.setdefault((int(vocab.word_len[token_id]), bool(vocab.leads_digit[token_id])), token_id)
    assert any(digit for _, digit in by_len)
    for (length, _), token_id in by_len.items():
        assert bool(allowed[token_id]) == (length <= left), (length, vocab.text[token_id])
        assert bool(allowed[token_id]) == (matcher.validate([token_id]) == 1)
    for end in (" FROM", ",", " FROM atom"):
        tokens = xgr_compiler.encode(end)
        assert allowed[tokens[0]] and matcher.validate(tokens) == len(tokens)
    assert matcher.accept_text(" FROM atom") and matcher.can_stop()


def test_a_long_schema_name_is_typed_whole_through_the_mask(xgr_compiler: Any, compiled: Any) -> None:
    matcher = compiled.matcher()
    assert matcher.accept_text(f"SELECT {LONG} FROM atom WHERE {LONG[:80]}")
    allowed = _allowed(xgr_compiler, matcher)
    assert allowed[xgr_compiler.encode("x")[0]]
    assert matcher.accept_text(LONG[80:] + " > 1") and matcher.can_stop()


def test_a_greedy_word_loop_ends(xgr_compiler: Any, compiled: Any) -> None:
    """Through the masks: typing letters of an alias while allowed stops at the cap."""
    matcher = compiled.matcher()
    assert matcher.accept_text("SELECT element ")
    token = xgr_compiler.encode("aaaa")[0]
    typed = 0
    while _allowed(xgr_compiler, matcher)[token]:
        assert matcher.accept_token(token)
        typed += len(matcher.vocab.text[token])
    assert 90 - len(matcher.vocab.text[token]) < typed <= 90
    assert matcher.accept_text(" FROM atom") and matcher.can_stop()


@pytest.mark.parametrize("left", [0, 1, 5])
def test_the_mask_is_exact_at_the_number_cap(xgr_compiler: Any, compiled: Any, left: int) -> None:
    """A number `left` digits short of the cap: every word-piece token continuing it is
    allowed iff it fits (a sample across word lengths), and the number can end."""
    matcher = compiled.matcher()
    assert matcher.accept_text("SELECT atom_id FROM atom WHERE element > " + "1" * (MAX_NUMBER - left))
    allowed = _allowed(xgr_compiler, matcher)
    for digit in "0123456789":
        token = xgr_compiler.encode(digit)[0]
        assert bool(allowed[token]) == (left > 0) == (matcher.validate([token]) == 1)
    vocab = matcher.vocab
    kind = vocab.kinds.index("")
    sample: dict[int, int] = {}
    for token_id in range(len(vocab.text)):
        if vocab.kind_of[token_id] == kind and vocab.word_len[token_id]:
            sample.setdefault(int(vocab.word_len[token_id]), token_id)
    for token_id in sample.values():
        assert bool(allowed[token_id]) == (matcher.validate([token_id]) == 1), vocab.text[token_id]
    for end in (" AND atom_id = 'a'", ".5", " OR 1 = 1", " LIMIT 1"):
        tokens = xgr_compiler.encode(end)
        assert allowed[tokens[0]], end
    assert matcher.accept_text(" AND atom_id = 'a'") and matcher.can_stop()


def test_a_greedy_digit_loop_ends(xgr_compiler: Any, compiled: Any) -> None:
    """Through the masks: writing a digit while allowed stops at MAX_NUMBER digits, after a
    point too; the query then ends."""
    matcher = compiled.matcher()
    assert matcher.accept_text("SELECT CAST(atom_id AS REAL) FROM atom WHERE element > 1")
    zero = xgr_compiler.encode("0")[0]
    for start in (1, 0):  # the digits before the point (one typed), then after it
        typed = start
        while _allowed(xgr_compiler, matcher)[zero]:
            assert matcher.accept_token(zero)
            typed += 1
        assert typed == MAX_NUMBER
        assert not matcher.accept_token(zero)
        if start:
            assert matcher.accept_text(".")
    assert matcher.accept_text(" LIMIT 1") and matcher.can_stop()
