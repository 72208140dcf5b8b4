"""LiteralRows: one grammar row for every position inside one SQL string literal.

A grammar's mask depends only on its residual language: the texts that may still follow.
Inside a single-quoted literal (`'abc`) that language is `[^']* ('' [^']*)* '` followed by
whatever may follow the literal where it was opened, the same at every position of the
literal. So the grammar's row (xgrammar's: ~150-300 µs inside a literal on Qwen2.5, where
every token that closes it and runs on is re-parsed) is filled at the first position of a
*run* and copied at the next ones. Inside a double-quoted one (`"abc`) the text is also a
quoted name (a column `"name"`, a qualifier `"x".col`, an alias), so its language is the
same at two positions only when no schema name (tables, columns: the grammar's
case-insensitive tries, ASCII letters folded) starts with the text typed (so never when
it is empty: `""` is a string, and no name).

A run starts at a position inside a literal (mode `'`, or `"` qualifying as above), and
goes on while each token read keeps the mode and holds neither the quote character (a
closer, an escape `''`, a new literal) nor a newline (a newline ends a quoted name's
reading). A token whose text holds U+FFFD (bytes that are not whole UTF-8 characters: a
byte-level token ending or starting inside a character) neither starts nor continues a run:
after it the grammar's language is not the literal's (the next bytes must finish the
character), so its position is filled, and the run starts afresh after it. Two positions of one run see the same language; the row kept is keyed by the
run's first position and the trailing whitespace run (the matcher's whitespace cap ANDs a
mask per run length into the grammar's row). Positions are history lengths: a rollback
below a run's first position drops the row (the tokens it was filled under are gone).

Knows nothing of the scope layer's verdicts (only its reading mode and quoted text),
backends or engines; the grammar's shape it relies on is grammars.sql.grammar's.
"""

from __future__ import annotations

import numpy as np

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class LiteralRows:
    """Run starts per position and the one grammar row kept (int32 [W])."""

    def __init__(self, names: frozenset[str], *, words: int) -> None:
        self._names = tuple(names)  # lower-cased table and column names
        self._starts: list[int | None] = [None]  # per position: its run's first position
        self._key: tuple[int, int] | None = None  # (run start, whitespace run) of `_row`
        self._row = np.empty(words, dtype=np.int32)  # [W]

    def _may_be_name(self, typed: str) -> bool:
        folded = typed.translate(_ASCII_LOWER)
        return any(name.startswith(folded) for name in self._names)

    def accepted(self, *, mode: str, quoted: str, text: str) -> None:
        """Record the position after a token of `text`, whose reading left the scope
        reader in `mode` with `quoted` typed (the quoted name's text so far)."""
        position = len(self._starts)
        start: int | None = None
        whole = "\ufffd" not in text  # else the position may be inside a character
        if whole and (mode == "'" or (mode == '"' and not self._may_be_name(quoted))):  # "" starts every name
            previous = self._starts[-1]
            goes_on = previous is not None and mode not in text and "\n" not in text
            start = previous if goes_on else position
        self._starts.append(start)

    def rolled_back(self, num_tokens: int) -> None:
        del self._starts[len(self._starts) - num_tokens:]
        if self._key is not None and self._key[0] >= len(self._starts):
            self._key = None

    def get(self, whitespace_run: int, out: np.ndarray) -> bool:  # out [W] int32
        """Copy the kept row into `out` if it serves the current position."""
        start = self._starts[-1]
        if start is None or self._key != (start, whitespace_run):
            return False
        np.copyto(out, self._row)
        return True

    def put(self, whitespace_run: int, row: np.ndarray) -> None:  # row [W] int32
        """Keep the grammar's row just filled at the current position (if inside a run)."""
        start = self._starts[-1]
        if start is not None:
            np.copyto(self._row, row)
            self._key = (start, whitespace_run)

    def forget(self) -> None:
        self._key = None
