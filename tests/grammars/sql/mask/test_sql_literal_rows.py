"""LiteralRows (grammars.sql.mask.literal_rows): the grammar row copied along a SQL literal is the
row a fresh matcher fills after the same history, at every position, through drafts and
rollbacks; runs break where the grammar's language may change."""

from __future__ import annotations

import numpy as np
import pytest

from grammars import spec_from_request
from grammars.sql.mask.literal_rows import LiteralRows
from tests.grammars.test_speculative_rows import _reference_row, _speculative_walk

SCHEMA = ("CREATE TABLE singer (id INT, name TEXT, nation TEXT, age INT); "
          "CREATE TABLE concert (id INT, singer_id INT, venue TEXT);")
SPEC = spec_from_request({"response_format": {"type": "sql", "sql": {"schema": SCHEMA}}})


def _rows(names: frozenset[str] = frozenset({"name", "nation"})) -> LiteralRows:
    return LiteralRows(names, words=3)


def _kept(rows: LiteralRows, run: int = 0) -> bool:
    return rows.get(run, np.zeros(3, dtype=np.int32))


def test_a_single_quoted_run_goes_on_until_a_quote_or_a_newline() -> None:
    rows = _rows()
    rows.accepted(mode="'", quoted="", text=" '")  # position 1 opens the run
    rows.put(0, np.full(3, 7, dtype=np.int32))
    rows.accepted(mode="'", quoted="", text="Ada")
    out = np.zeros(3, dtype=np.int32)
    assert rows.get(0, out) and out.tolist() == [7, 7, 7]
    assert not _kept(rows, run=1)  # another whitespace run: another cap on the row
    rows.accepted(mode="'", quoted="", text="''")  # an escape: the reader saw a close and an open
    assert not _kept(rows)
    rows.put(0, np.full(3, 8, dtype=np.int32))
    rows.accepted(mode="'", quoted="", text=" von\n")
    assert not _kept(rows)
    rows.accepted(mode="", quoted="", text="'")
    assert not _kept(rows)


def test_a_double_quoted_run_needs_text_no_schema_name_starts_with() -> None:
    rows = _rows()
    rows.accepted(mode='"', quoted="", text=' "')  # empty: `""` is a string, not a name
    rows.put(0, np.ones(3, dtype=np.int32))
    assert not _kept(rows)
    rows.accepted(mode='"', quoted="NA", text="NA")  # a prefix of `name` (ASCII case folded)
    rows.put(0, np.ones(3, dtype=np.int32))
    assert not _kept(rows)
    rows.accepted(mode='"', quoted="NAx", text="x")  # no name starts with it: a run starts
    rows.put(0, np.full(3, 5, dtype=np.int32))
    rows.accepted(mode='"', quoted="NAx y", text=" y")
    assert _kept(rows)


def test_a_rollback_below_the_runs_start_drops_the_row() -> None:
    rows = _rows()
    rows.accepted(mode="", quoted="", text=" =")
    rows.accepted(mode="'", quoted="", text=" '")  # run starts at position 2
    rows.put(0, np.ones(3, dtype=np.int32))
    rows.accepted(mode="'", quoted="", text="a")
    rows.rolled_back(1)
    assert _kept(rows)  # back at position 2: its own row
    rows.rolled_back(1)
    rows.accepted(mode="'", quoted="", text=" '")  # position 2 again, after other tokens maybe
    assert not _kept(rows)


@pytest.mark.parametrize("text", [
    "SELECT name FROM singer WHERE name = 'Ada  Love''lace von\nX' AND nation = \"Lux embourg\"",
    "SELECT venue FROM concert WHERE venue LIKE '%a, b%' OR venue = 'x    y' OR venue = 'Ford Motor Company'",
    "SELECT name FROM singer WHERE nation = \"Lux\nembourg\" OR nation = \"Rome\" OR name = \"na\"",
])
def test_every_row_equals_a_fresh_matchers(xgr_compiler, text: str) -> None:  # type: ignore[no-untyped-def]
    compiled = xgr_compiler.compile(SPEC)
    matcher = compiled.matcher()
    bitmask = xgr_compiler.allocate_bitmask(1)
    scratch = xgr_compiler.allocate_bitmask(1)
    tokens = xgr_compiler.encode(text)
    for index, token in enumerate(tokens):
        matcher.fill_mask(bitmask, 0)
        expected = _reference_row(compiled, tokens[:index], scratch)
        assert np.array_equal(bitmask[0].numpy(), expected), index
        assert matcher.accept_token(token)
    assert matcher.stats["literal_rows"] > 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("pieces", [
    # a quoted name typed piece by piece, then text no name starts with, then a newline
    ['SELECT name FROM singer WHERE nation = "', "n", "at", "x", "y", "\n", "z", '"'],
    ['SELECT name FROM singer WHERE "', "n", "ation", '"', " = 'a", "    ", "b'"],
    ["SELECT name FROM singer WHERE name = '", "x", "    ", "y", "'"],
])
def test_runs_break_where_the_language_changes(xgr_compiler, pieces: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Token by token as written (a column name typed in pieces, 4 spaces: the whitespace
    cap's limit), each row against a fresh matcher's."""
    compiled = xgr_compiler.compile(SPEC)
    matcher = compiled.matcher()
    bitmask = xgr_compiler.allocate_bitmask(1)
    scratch = xgr_compiler.allocate_bitmask(1)
    tokens = [token for piece in pieces for token in xgr_compiler.encode(piece)]
    for index, token in enumerate(tokens):
        matcher.fill_mask(bitmask, 0)
        assert np.array_equal(bitmask[0].numpy(), _reference_row(compiled, tokens[:index], scratch)), index
        assert matcher.accept_token(token), index


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_drafts_and_rollbacks_inside_literals_keep_rows_exact(xgr_compiler, seed: int) -> None:  # type: ignore[no-untyped-def]
    compiled = xgr_compiler.compile(SPEC)
    text = "SELECT name FROM singer WHERE name = 'Ada Lovelace von Byron' OR nation = \"United Kingdom of GB\""
    _speculative_walk(xgr_compiler, compiled, xgr_compiler.encode(text), seed=seed)


def test_a_token_ending_inside_a_character_neither_starts_nor_continues_a_run() -> None:
    rows = _rows()
    rows.accepted(mode="'", quoted="", text=" 'a")  # position 1 opens the run
    rows.put(0, np.full(3, 7, dtype=np.int32))
    rows.accepted(mode="'", quoted="", text="\ufffd")  # a lead byte: the next must finish it
    assert not _kept(rows)
    rows.put(0, np.full(3, 8, dtype=np.int32))  # its own row, kept for no one
    rows.accepted(mode="'", quoted="", text="\ufffdb")  # the continuation byte, then `b`
    assert not _kept(rows)
    rows.accepted(mode="'", quoted="", text="c")  # a whole character again: a run starts here
    assert not _kept(rows)
    rows.put(0, np.full(3, 9, dtype=np.int32))
    rows.accepted(mode="'", quoted="", text="d")
    out = np.zeros(3, dtype=np.int32)
    assert rows.get(0, out) and out.tolist() == [9, 9, 9]


def test_rows_inside_a_literal_split_between_bytes_equal_a_fresh_matchers(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    """A literal typed with byte-level tokens that split a character (`р`: D1 80): after the
    lead byte only tokens that finish the character may come, so the literal's row may not
    be copied there (it allowed ~150k tokens the matcher then refused), nor the lead byte's
    row after the character."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte = bytes_to_unicode()
    lead, cont = (xgr_compiler.tokenizer.convert_tokens_to_ids(byte[b]) for b in (0xD1, 0x80))
    compiled = xgr_compiler.compile(SPEC)
    matcher = compiled.matcher()
    bitmask = xgr_compiler.allocate_bitmask(1)
    scratch = xgr_compiler.allocate_bitmask(1)
    tokens = [*xgr_compiler.encode("SELECT name FROM singer WHERE name = 'ab"), lead, cont, lead, cont,
              *xgr_compiler.encode("cd e'")]
    for index, token in enumerate(tokens):
        matcher.fill_mask(bitmask, 0)
        assert np.array_equal(bitmask[0].numpy(), _reference_row(compiled, tokens[:index], scratch)), index
        assert matcher.accept_token(token), index
