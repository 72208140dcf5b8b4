"""Predicates: how often each predicate of a query has been written, read one character at a time.

A degenerate greedy loop can repeat one condition until max_tokens (`WHERE T1.Make = 'General
Motors' OR T1.Make = 'General Motors' AND ...`). `Predicates` follows the predicates of a
query for `SqlScope` (grammars.sql.scope) and refuses the one that would be written more
than MAX_REPEATS times.

- A *predicate* is the text at one bracket depth from right after WHERE, ON, HAVING, AND,
  OR or WHEN to the next word or character there that ends it: a keyword of `ENDERS` (AND
  after BETWEEN is BETWEEN's own), a `,`, a `)` closing its depth, a `;` or the end of the
  text. Its text is normalized: ASCII letters lower-cased and whitespace dropped outside
  quotes, but for one space between two identifier characters (`a=b` and `A = b` are one
  predicate). A bracket deeper inside it is part of its text; inside that bracket AND, OR
  and WHEN start predicates of their own (so `(a OR b)` counts `b`, not `a`); outside WHERE /
  ON / HAVING (a call's arguments in a select list) none is counted.
- `char(ch, word=, mode=, depth=)` reads one character, given the reader's state before it
  (the word being typed, the quote mode, the bracket depth), and returns False where a
  predicate written MAX_REPEATS times already ends with it (a word is kept whole when the
  character after it comes). `end()`: whether the text may end; `ended()` the counts then.
- `capped(depth=)`: where a word starting here cannot end the predicate open at this depth
  (its text so far was written MAX_REPEATS times), the words that may: `GOES_ON` (after a
  complete operand the grammar takes each of them, and none ends the predicate; AND too
  after BETWEEN), so the loop is refused at the first letter of its AND / OR; None elsewhere.
  There an operator character is refused too (`char`): a loop refused its AND / OR would
  otherwise chain comparisons (`T1.Make = 'General Motors' = 'General Motors' = ...`; no gold
  query chains one).
- `signature()` is None while no text has been written MAX_REPEATS - 1 times (every query
  that is not a loop): reading one token can then refuse nothing, as a token completes a
  predicate twice only if it holds one whole (a starter, its text and an ender: no token of
  Qwen2.5 does). Past that, the texts so counted, and the open predicates' texts that may
  still become one of them.

Knows nothing of schemas, tokens or masks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# the most times one predicate (its normalized text) may be written in a query; gold Spider
# dev / BIRD mini-dev: 2 (docs/sql.md)
MAX_REPEATS = 3
CLAUSES = frozenset("where on having".split())  # start a predicate anywhere
STARTERS = frozenset("and or when".split())  # start one inside a predicate (at its depth or deeper)
ENDERS = frozenset(("and or where on having when then else end group order limit union intersect except "
                    "natural inner cross left right full outer join select from").split())
GOES_ON = frozenset("not is in like glob between".split())  # after a complete operand, not ending it
_GOES_ON_BETWEEN = GOES_ON | {"and"}
_OPERATORS = frozenset("=<>!|+-*/%&~^")  # characters of SQL operators (`capped`: refused there)
_IDENT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")


@dataclass
class Predicates:
    text: str = ""  # the normalized text read since the outermost open predicate started
    offset: int = 0  # the position in the query's normalized text where `text` starts
    gap: bool = False  # whitespace read since the last character kept
    # the open predicates, outermost first: (bracket depth, start in the normalized text, after BETWEEN)
    open: tuple[tuple[int, int, bool], ...] = ()
    counts: dict[str, int] = field(default_factory=dict)  # shared between copies: replaced, never changed
    near: frozenset[str] = frozenset()  # texts written at least MAX_REPEATS - 1 times

    def copy(self) -> Predicates:
        return Predicates(self.text, self.offset, self.gap, self.open, self.counts, self.near)

    def signature(self) -> tuple[object, ...] | None:
        if not self.near:
            return None
        counted = tuple(sorted((text, min(self.counts[text], MAX_REPEATS)) for text in self.near))
        live = tuple((depth, between, text if any(n.startswith(text) for n in self.near) else None)
                     for depth, between, text in ((d, b, self._text(s)) for d, s, b in self.open))
        return counted, live, self.gap and bool(self.text) and self.text[-1] in _IDENT

    def _text(self, start: int, end: int | None = None) -> str:
        return self.text[start - self.offset:None if end is None else end - self.offset].strip()

    def capped(self, *, depth: int) -> frozenset[str] | None:
        """Where the predicate open at `depth` (the reader outside a word and a literal) was
        written MAX_REPEATS times already: the words that may start here (GOES_ON, with AND
        after BETWEEN: its own); None elsewhere."""
        if not self.near or not self.open or self.open[-1][0] != depth:
            return None
        _, start, between = self.open[-1]
        if self.counts.get(self._text(start), 0) < MAX_REPEATS:
            return None
        return _GOES_ON_BETWEEN if between else GOES_ON

    def may_cap(self) -> bool:
        """Whether an open predicate's text is a prefix of one written MAX_REPEATS - 1 times
        or more: only then can reading on (an operator character, `capped`) be refused."""
        return any(near.startswith(self._text(start)) for _, start, _ in self.open for near in self.near)

    def end(self) -> bool:
        """Whether the text may end here (every open predicate ends)."""
        return self.ended() is not None

    def ended(self) -> Predicates | None:
        """The counts once the text ends here (every open predicate ends); None: refused."""
        after = self.copy()
        return after if after._close(lambda depth: True, cut=0) else None

    def char(self, ch: str, *, word: str, mode: str, depth: int) -> bool:
        if mode:  # inside a literal or quoted name: kept as written
            self._keep(ch)
            return True
        if ch in _IDENT:
            return True  # the word is kept whole when it ends
        if word:
            low = word.lower()
            if self.gap and self.text and self.text[-1] in _IDENT:
                self._keep(" ")
            self.gap = False
            self._keep(low)
        if word and ch != "." and not word[0].isdigit():
            top = self.open[-1] if self.open and self.open[-1][0] == depth else None
            if top is not None and low == "between":
                self.open = (*self.open[:-1], (depth, top[1], True))
            elif top is not None and top[2] and low == "and":
                self.open = (*self.open[:-1], (depth, top[1], False))  # BETWEEN's AND
            elif low in ENDERS:
                inside = any(d <= depth for d, _, _ in self.open)  # AND / OR / WHEN: inside a predicate
                if not self._close(lambda d: d >= depth, cut=len(word)):
                    return False
                if low in CLAUSES or (low in STARTERS and inside):
                    self.open = (*self.open, (depth, self.offset + len(self.text), False))
        if ch in _OPERATORS and self.capped(depth=depth) is not None:
            return False  # `a = 'x' = 'x'`: no operator runs a capped predicate on
        if ch in "),;" and not self._close(lambda d: d >= depth, cut=0):
            return False
        if ch.isspace():
            self.gap = True
            return True
        self.gap = False
        self._keep(ch)
        return True

    def _keep(self, ch: str) -> None:
        if self.open:
            self.text += ch

    def _close(self, closes: object, *, cut: int) -> bool:
        """Close the open predicates at the depths `closes` (a predicate on depths) selects,
        the last `cut` characters of the text not theirs; False where one was written
        MAX_REPEATS times already."""
        assert callable(closes)
        end = self.offset + len(self.text) - cut
        kept = []
        counts = None
        for depth, start, between in self.open:
            if not closes(depth):
                kept.append((depth, start, between))
                continue
            text = self._text(start, end)
            if not text:
                continue
            if counts is None:
                counts = dict(self.counts)
            count = counts.get(text, 0)
            if count >= MAX_REPEATS:
                return False
            counts[text] = count + 1
            if count + 1 >= MAX_REPEATS - 1:
                self.near = self.near | {text}
        if counts is not None:
            self.counts = counts
        self.open = tuple(kept)
        if not kept:
            self.offset += len(self.text)
            self.text = ""
        return True
