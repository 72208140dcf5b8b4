"""ScopedSqlMatcher: a schema-aware SQL grammar matcher whose masks also respect identifier scopes.

Contract (the Matcher contract of grammars.matcher, plus):
- wraps the grammar's own matcher (`inner`, e.g. the xgrammar one) and a `SqlScope` per
  accepted token (grammars.sql.scope); a token is accepted iff the grammar accepts it and the
  scope reader accepts its text with the word being typed still viable; a stop token iff the
  grammar is complete and the scope reader may end (every qualifier bound, ...).
- `fill_mask` is the grammar's mask ANDed with the scope layer's, exact over the whole
  vocabulary, read from one `_SignatureTable` per scope signature (a token's verdict is a
  function of the signature; the tables are shared by the grammar's matchers, the
  `_TABLES` most recently used kept): word pieces (grammars.sql.mask.vocab: ~84k tokens that
  are at most one separator and one identifier run) of the big kinds, blanks, operators and
  stop tokens are decided whole when the table is made (precomputed groups, never a
  vocabulary loop; where any identifier but a glued alias may come, grammars.sql.glue, a
  co-finite mask; the row made once per distinct inputs, `_KEEPS` kept); punctuation
  tokens (grammars.sql.mask.punct: no identifier, ~56k on Qwen2.5, most of them non-ASCII text)
  are decided per kind where the state settles their verdict (a few whole-row operations);
  every other token the grammar allows and the table has no verdict for is read then, once
  per reading key, and the verdict recorded for every token of the vocabulary with that key:
  per small piece kind (~75 kinds, ~740 tokens), per opaque shape (sql_vocab.opaque_shape:
  a reading shape less the text of its quoted names), per reading shape for tokens whose
  reading consults that text (SqlScope.touched: FROM's alias slots; but a punctuation
  token closing one fresh quoted name, sql_punct.known_names, per opaque shape still),
  either shape less a leading blank where reading a blank leaves the signature unchanged;
  inside a checked quoted name (SqlScope.quoted_choices: `[x` after FROM, `T1."x`) only the tokens
  keeping its text a prefix of one of its names, or closing on one, are kept (a vocabulary
  mask per text typed, grammars.sql.mask.vocab.inside_checked), those closing it read one by
  one; punctuation tokens ending inside such a name by its text
  (grammars.sql.mask.punct.checked_kinds); inside a literal (only tokens holding its
  closer are read), per reading shape of the text
  after the first closer (the text before it only extends the literal), per token where
  that reading consults a closed name's text
  (SqlScope.touched). A fill whose
  tokens all have verdicts is a few whole-row operations; where a predicate was written
  MAX_REPEATS - 1 times (grammars.sql.repeats: a loop), and in a FROM past MAX_FROM_ITEMS
  (grammars.sql.scope: a loop; quoted names checked as typed), every such token is read one
  by one (a predicate's text keeps the literals and operators the keys drop). A token is allowed iff
  `accept_token` would accept it.
- Never a dead end by construction of SqlScope: a prefix it lets through can always be
  completed (an alias can be any identifier, a bound qualifier exists after FROM, a table
  with the required columns exists before it, JOIN is always possible while FROM must go on).
- inside a string literal the grammar's row is filled at the literal's first position and
  copied at the next ones (grammars.sql.mask.literal_rows: the grammar's language is the same
  there), where the inner matcher reports what else its row depends on (`whitespace_run`).
- `rollback(n)` pops n scope states and rolls the inner matcher back: exact.
- `forget()` drops the grammar's signature tables and the rows kept (a cold start, for
  benchmarks).
- `stats` counts fills, readings (`checked`), fills that read nothing (`memo_hits`) and
  grammar rows copied along a literal (`literal_rows`): pure counters.

Knows nothing of sampling, engines or HTTP.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from grammars.matcher import Matcher
from grammars.sql.check import check_sql
from grammars.sql.mask.literal_rows import LiteralRows
from grammars.sql.mask.punct import checked_kinds, known_names, punctuation_verdicts
from grammars.sql.mask.vocab import BIG_KINDS, SqlVocab, opaque_shape, pack_ids, reading_shape
from grammars.sql.scope import MAX_NUMBER, Hashed, SqlSchema, SqlScope, _Scope

_KEEPS = 512  # distinct `keep` rows a vocabulary keeps (~19 KB each on Qwen2.5)
_TABLES = 256  # signature tables a compiled grammar keeps (~38 KB each on a 152k vocabulary, `keep` shared)
_CLOSERS = {"'": "'", '"': '"', "`": "`", "[": "]"}  # literal mode -> the character that closes it
# grammars.closing's moves after the names (ScopedSqlMatcher.closing_moves): what ends a
# call, a CASE, a SELECT core, a clause, an operand
_SQL_MOVES = (")", ".", " FROM", " END", " 1", " AS", " REAL", " THEN 1", " ELSE 1", " BY 1", " NULL", " AND 1", "1",
              " ON 1", "(1)", " JOIN", ",")
# of a qualifier's binding (JOIN, a table, AS: closing_debt), what the FROM slot shows written
_ITEM_WRITTEN = {"table": 1, "after_table": 2, "after_as": 3}
_CLOSING_NAMES = 8  # names a closing move may write at one state (the shortest)


class ScopedSqlMatcher(Matcher):
    def __init__(self, inner: Matcher, *, schema: SqlSchema, vocab: SqlVocab,
                 vocab_size: int, stop_token_ids: Sequence[int],
                 encode: Callable[[str], list[int]]) -> None:
        super().__init__(vocab_size=vocab_size, stop_token_ids=stop_token_ids, encode=encode)
        self.inner = inner
        self.vocab = vocab
        self._states = [SqlScope(schema)]
        self._signatures: list[Hashed | None] = [None]
        self._memo = schema.memo  # signature -> _SignatureTable, shared by the grammar's matchers
        self.stats = {"fills": 0, "checked": 0, "memo_hits": 0, "literal_rows": 0}
        self._stop_bits = _bits(np.asarray(sorted(self._stop_set), dtype=np.int64), vocab.num_words)
        self._not_stops = ~self._stop_bits  # stop tokens are `keep`'s, never a punctuation verdict's
        self._unknown = np.empty(vocab.num_words, dtype=np.uint32)  # a fill's undecided tokens
        self._index = _rest_index(vocab)
        self._none = self._index.none  # one per vocabulary: `_keep`'s memo keys on it
        self._name_lengths: dict[str, int] = {}  # closing_debt's: tokens per qualifier
        self._tables = {table: sorted(columns) for table, columns in schema.columns.items()}  # closing_valid's
        # the grammar's row copied along a literal (None: the inner matcher's row depends on
        # state it does not report)
        self._literal_rows = (LiteralRows(schema.tables | schema.all_columns, words=vocab.num_words)
                              if inner.whitespace_run() is not None else None)

    # -- the scope reader on one token ------------------------------------------------------
    def _reads(self, state: SqlScope, token_id: int) -> SqlScope | None:
        probe, accepted = self._probe(state, token_id)
        return probe if accepted else None

    def _probe(self, state: SqlScope, token_id: int) -> tuple[SqlScope, bool]:
        """(a copy of `state` that read the token's text, with `touched` from that reading
        alone; whether the text may come here)."""
        probe = state.copy()
        probe.touched = False
        return probe, probe.feed(self.vocab.text[token_id]) and probe.viable()

    def _signature(self) -> Hashed:
        """The current state's signature, with its hash computed once (a memo key)."""
        signature = self._signatures[-1]
        if signature is None:
            signature = self._signatures[-1] = Hashed(self._states[-1].signature())
        return signature

    # -- Matcher primitives -----------------------------------------------------------------
    def _accept(self, token_id: int) -> bool:
        after = self._reads(self._states[-1], token_id)
        if after is None or not self.inner._accept(token_id):
            return False
        self._states.append(after)
        self._signatures.append(None)
        if self._literal_rows is not None:
            self._literal_rows.accepted(mode=after.mode, quoted=after.quoted, text=self.vocab.text[token_id])
        return True

    def _rollback(self, num_tokens: int) -> None:
        self.inner._rollback(num_tokens)
        del self._states[len(self._states) - num_tokens:]
        del self._signatures[len(self._signatures) - num_tokens:]
        if self._literal_rows is not None:
            self._literal_rows.rolled_back(num_tokens)

    def _is_complete(self) -> bool:
        return self.inner._is_complete() and self._states[-1].can_end()

    def _jump_forward(self) -> str:
        return ""  # the grammar's forced text may break a scope rule; propose none

    def closing_moves(self) -> tuple[str, ...]:
        """grammars.closing's moves here: the closer of the literal or quoted name open; or
        the completions of the word being typed and a space that ends it; or the names that
        may come (the qualifiers FROM must bind first, then the tables that fit them or hold
        a bare column, then the shortest); then SQL's closers and fillers."""
        state = self._states[-1]
        if state.mode:
            return (_CLOSERS[state.mode],)
        typed = state.word.lower()
        names = state.word_set_at_start if typed else state.word_set()
        scope = state.scopes[-1] if state.scopes else None
        in_from = scope is not None and scope.clause == "from"
        if names is None and in_from:
            names = state.schema.table_words  # where FROM takes any table (or an alias)
        fitting = [] if names is None else sorted((n for n in names if n.startswith(typed)), key=lambda n: (len(n), n))
        if in_from and scope is not None:  # the qualifiers FROM must bind, and the tables that fit them first
            unbound = sorted(q for q in scope.refs if q not in scope.bound)
            fits = {t for t in fitting if any(scope.refs[q] <= state.schema.columns_of(t) for q in unbound)
                    or scope.bare & state.schema.columns_of(t)}  # or holds a bare column of the select list
            fitting = ([q for q in unbound if q.startswith(typed)] + [t for t in fitting if t in fits]
                       + [t for t in fitting if t not in fits])
        fitting = fitting[:_CLOSING_NAMES]
        if typed:
            return (*(n[len(typed):] for n in fitting if len(n) > len(typed)), " ", *self._derived_moves(state),
                    *_SQL_MOVES)
        lead = "" if state.qual is not None else " "  # `Q.col`: the column right after the point
        return (*(lead + n for n in fitting), *self._derived_moves(state), *_SQL_MOVES)

    @staticmethod
    def _derived_moves(state: SqlScope) -> list[str]:
        """In FROM, a bare column of the select list that no table bound holds, joined in
        alone from a table holding it (`JOIN (SELECT c FROM t)`): a table itself could make
        another bare column ambiguous."""
        schema = state.schema
        moves = []
        for column in ScopedSqlMatcher._uncovered(state, state.scopes[-1] if state.scopes else None)[:2]:
            tables = sorted(t for t in schema.table_words if column in schema.columns_of(t))[:2]
            moves += [f" JOIN (SELECT {column} FROM {table})" for table in tables]
        return moves

    def closing_valid(self) -> bool:
        """sqlite compiles the query against the schema (grammars.sql.check): the scope
        layer does not judge everything (aggregate misuse, some ambiguity)."""
        text = "".join(self.vocab.text[token] for token in self._history if token >= 0)
        return check_sql(text, self._tables).valid

    def closing_debt(self) -> int:
        """Open brackets and CASEs, a literal or `Q.` open, an operand expected, a FROM per
        SELECT still before it (two), per qualifier FROM must bind a JOIN, a table, AS and its
        tokens (less what the FROM item being read has written of them), and per bare column
        no table in FROM holds the join that brings it (eight)."""
        state = self._states[-1]
        debt = len(state.parens) + len(state.cases) + bool(state.mode) + bool(state.qual) + state.operand
        typed = state.word.lower()  # a qualifier typed in an alias slot: bound at its end
        for scope in state.scopes:
            unbound = [qual for qual in scope.refs if qual not in scope.bound and qual != typed]
            debt += 2 * (scope.clause == "select") + sum(3 + self._name_tokens(qual) for qual in unbound)
            if unbound and scope.clause == "from":
                debt -= _ITEM_WRITTEN.get(scope.slot, 0)
        return debt + 8 * sum(len(self._uncovered(state, scope)) for scope in state.scopes)

    @staticmethod
    def _uncovered(state: SqlScope, scope: _Scope | None) -> list[str]:
        """In the FROM (or an ON) of `scope`, the bare columns of its select list that no
        table bound there holds (none where a subquery whose result is unknown is bound)."""
        if (scope is None or scope.clause not in ("from", "on") or not scope.bare or not scope.bound
                or None in scope.bound.values()):
            return []  # (before FROM's first table, its table slot offers those that hold them)
        held = frozenset().union(*(state.schema.columns_of(t) for t in scope.bound.values()))
        return sorted(scope.bare - held)

    def _name_tokens(self, name: str) -> int:
        count = self._name_lengths.get(name)
        if count is None:
            if len(self._name_lengths) > 4096:
                self._name_lengths.clear()
            count = self._name_lengths[name] = len(self._encode(" " + name))
        return count

    def forget(self) -> None:
        """Drop the signature tables of this matcher's grammar (all its matchers share
        them) and its literal rows: the next fills start cold, as on a freshly compiled
        grammar."""
        self._memo.clear()
        if self._literal_rows is not None:
            self._literal_rows.forget()

    def _fill(self, bitmask: torch.Tensor, row: int) -> None:  # bitmask [R, W] int32
        words = bitmask.numpy()[row]  # [W] int32, shares memory with the tensor
        literal = self._literal_rows
        if literal is None:
            self.inner._fill(bitmask, row)
        else:
            run = self.inner.whitespace_run()
            assert run is not None
            if literal.get(run, words):
                self.stats["literal_rows"] += 1
            else:
                self.inner._fill(bitmask, row)
                literal.put(run, words)
        self.stats["fills"] += 1
        bits = words.view(np.uint32)  # [W]
        state = self._states[-1]
        table = self._table(state)
        unknown = np.bitwise_and(bits, table.undecided, out=self._unknown)  # [W] uint32
        if np.count_nonzero(unknown):  # ~2x faster than .any() on uint32
            self._decide(unknown, state, table)
        else:
            self.stats["memo_hits"] += 1
        bits &= table.passing

    def _table(self, state: SqlScope) -> _SignatureTable:
        """The current signature's table, made on its first fill (the memo holds at most
        _TABLES, the least recently used dropped first)."""
        key = self._signature()
        table: _SignatureTable | None = self._memo.pop(key, None)
        if table is not None:
            self._memo[key] = table  # most recently used last
        else:
            accepted, refused = punctuation_verdicts(state)
            decided = refusals = None
            if accepted or refused:
                decided = self.vocab.punct_mask(accepted | refused).view(np.uint32) & self._not_stops
                refusals = self.vocab.punct_mask(refused).view(np.uint32) & self._not_stops
            kinds, names = checked_kinds(state)
            if kinds:  # tokens ending inside a checked quoted name: by the name's text
                tails, tails_refused = self.vocab.checked_tails(kinds, names)
                decided = tails.view(np.uint32) | (0 if decided is None else decided)
                refusals = tails_refused.view(np.uint32) | (0 if refusals is None else refusals)
            keep = self._keep(state)
            if state.mode and state.checked is not None:  # inside a checked quoted name
                keep = keep & (self.vocab.inside_checked(_CLOSERS[state.mode], state.quoted.lower(), state.checked)
                               | self._stop_bits.view(np.int32))
            table = _SignatureTable(
                keep, self._stop_bits, decided=decided, refused=refusals,
                read=self._index.closing[state.mode] if state.mode else self._index.unclassed,
                unspaced=not state.mode and self._blank_keeps(state))
            while len(self._memo) >= _TABLES:
                try:
                    del self._memo[next(iter(self._memo))]
                except (KeyError, RuntimeError, StopIteration):  # another matcher took it meanwhile
                    break
            self._memo[key] = table
        return table

    def _keep(self, state: SqlScope) -> np.ndarray[Any, Any]:
        """[W] int32 mask of what the scope allows among the classes decided whole: word
        pieces of the big kinds (precomputed groups), blanks and operators (each reads like
        one representative outside a literal), stop tokens (can_end). Made once per distinct
        set of inputs (the vocabulary's cached masks, the blank / operator / end verdicts):
        many signatures share them."""
        vocab = self.vocab
        masks: list[np.ndarray[Any, Any] | None] = []  # per big kind: its pieces' mask, None: all allowed
        for kind in BIG_KINDS:
            if kind == "":
                typed = state.word
                allowed = block = None
                if not (typed and typed[0].isdigit()):
                    allowed = state.word_set_at_start if typed else state.word_set()
                    if allowed is None:
                        block = state.word_block_at_start if typed else state.word_block()
                masks.append(vocab.allowed(kind, typed.lower(), allowed) if allowed is not None else
                             vocab.allowed_except(kind, typed.lower(), *block) if block is not None else None)
            else:
                masks.append(self._piece_mask(state, kind))
        caps = [self._word_cap(state, kind) for kind in BIG_KINDS]
        numbers = [self._number_cap(state, kind) for kind in BIG_KINDS]
        outside = not state.mode
        verdicts = (outside and not state.copy().feed(" "), outside and not state.copy().feed(" ="),
                    not state.can_end())  # blanks, operators, stop tokens refused
        key = (*(0 if mask is None else id(mask) for mask in masks), *verdicts, *caps, *numbers)
        keeps = self._index.keeps
        hit = keeps.get(key)
        if hit is not None:
            return hit[0]
        keep = np.full(vocab.num_words, -1, dtype=np.int32)
        for kind, mask in zip(BIG_KINDS, masks, strict=True):
            if mask is not None:
                keep &= ~vocab.pieces[kind] | mask
        for kind, cap in zip(BIG_KINDS, caps, strict=True):
            if cap is not None:
                keep &= vocab.within(kind, cap[0], numbers=cap[1])
        for kind, limit in zip(BIG_KINDS, numbers, strict=True):
            if limit is not None:
                keep &= vocab.numbers_within(kind, limit)
        for refused, cls in zip(verdicts, (vocab.blank, vocab.ops, self._stop_bits.view(np.int32)), strict=True):
            if refused:
                keep &= ~cls
        if len(keeps) >= _KEEPS:
            keeps.clear()
        keeps[key] = (keep, masks)  # the masks held: ids in a live key are never reused
        return keep

    def _word_cap(self, state: SqlScope, kind: str) -> tuple[int, bool] | None:
        """(the longest word a piece of `kind` may bring here: SqlScope's `max_word` less the
        word already typed, for kind ""; whether a piece starting with a digit counts: it
        continues a word; after a number typed, MAX_NUMBER less its length, every piece
        counting: it continues the number), None where no piece of the kind is refused by it
        (inside a literal, or no piece that long)."""
        if kind == "" and state.word[:1].isdigit() and not state.mode:
            cap = MAX_NUMBER - len(state.word)
            return (cap, True) if cap < self.vocab.longest(kind) else None
        if self.vocab.longest(kind) <= state.schema.max_word - (len(state.word) if kind == "" else 0):
            return None  # most states: no piece that long
        if kind == "":
            typed = state.word
            if state.mode:
                return None
            cap = state.schema.max_word - len(typed)
        else:
            after = state.copy()
            if not after.feed(kind) or after.mode:  # refused whole, or the word is inside a literal
                return None
            cap = state.schema.max_word
        return (cap, kind == "" and bool(state.word)) if cap < self.vocab.longest(kind) else None

    def _number_cap(self, state: SqlScope, kind: str) -> int | None:
        """The longest word a piece of `kind` starting with a digit may bring here, where it
        starts a number (MAX_NUMBER); None where no piece of the kind is refused by it (no
        such piece that long, inside a literal, or the piece continues the word typed:
        `_word_cap`)."""
        if self.vocab.longest_number(kind) <= MAX_NUMBER:
            return None  # most vocabularies: no number piece that long
        if kind == "":
            if state.mode or state.word:
                return None
        else:
            after = state.copy()
            if not after.feed(kind) or after.mode:
                return None
        return MAX_NUMBER

    def _capped_piece_mask(self, state: SqlScope, kind: str) -> np.ndarray[Any, Any] | None:
        """`_piece_mask` with the word caps (`_word_cap`, `_number_cap`) applied."""
        mask = self._piece_mask(state, kind)
        cap = self._word_cap(state, kind)
        if cap is not None:
            within = self.vocab.within(kind, cap[0], numbers=cap[1])
            mask = within if mask is None else mask & within
        limit = self._number_cap(state, kind)
        if limit is not None:
            within = self.vocab.numbers_within(kind, limit)
            mask = within if mask is None else mask & within
        return mask

    def _piece_mask(self, state: SqlScope, kind: str) -> np.ndarray[Any, Any] | None:
        """Allowed pieces of `kind` (a pre other than ""): None when all are, or all refused
        (an all-zero mask) when the pre itself breaks a rule."""
        after = state.copy()
        if not after.feed(kind):
            return self._none
        if after.mode:  # the word is inside a literal or quoted name: read only where checked
            checked = after.checked
            return None if checked is None else self.vocab.allowed(
                kind, after.quoted.lower(), checked.names, numbers=False)
        allowed = after.word_set()
        if allowed is not None:
            return self.vocab.allowed(kind, "", allowed)
        block = after.word_block()
        return None if block is None else self.vocab.allowed_except(kind, "", *block)

    def _decide(self, unknown: np.ndarray[Any, Any], state: SqlScope, table: _SignatureTable) -> None:
        """Read the tokens of `unknown` ([W] uint32: allowed by the grammar, no verdict yet)
        and record the verdicts in `table`, for every token sharing a reading key with one
        read: inside a literal one per shape of the text after the closer (one per token
        where the closed name's text is consulted); outside, one per small piece kind,
        then one per opaque shape (sql_vocab.opaque_shape: quoted names' text dropped), then
        one per shape for the tokens whose opaque reading consulted a quoted name's text
        (SqlScope.touched); either shape less its leading " " where reading " " leaves the
        signature as it is (equal signatures read every text alike). Where a predicate was
        written MAX_REPEATS - 1 times (grammars.sql.repeats: only in a loop), one reading per
        token: its verdict may hang on a literal's text or an operator, which keys drop; so
        too past MAX_FROM_ITEMS (grammars.sql.scope), where every quoted name is checked."""
        ids = _token_ids(unknown)  # [n]
        if state.predicates.near or state.past_from_cap():  # a loop: a verdict may hang on text keys drop
            readings = np.asarray([self._probe(state, token_id)[1] for token_id in ids.tolist()], dtype=bool)
            self.stats["checked"] += len(ids)
            table.record(ids, ids[~readings])
            return
        index = self._index
        decided: list[np.ndarray[Any, Any]] = []
        refused: list[np.ndarray[Any, Any]] = []
        reads = 0
        if state.mode:
            literal = index.literal[state.mode]
            reads += self._read_keys(ids, literal, state, table, decided, refused)
            if table.touched:  # the closed name's text was consulted: one reading per token
                ids = ids[np.isin(literal.key[ids], list(table.touched))]
                verdicts = [self._probe(state, token_id)[1] for token_id in ids.tolist()]
                decided.append(ids)
                refused.append(ids[~np.asarray(verdicts, dtype=bool)])
                reads += len(ids)
        else:
            small = index.is_small[ids]
            if small.any():
                for kind_index in np.unique(self.vocab.kind_of[ids[small]]).tolist():
                    members = index.small_ids[index.kind_members[kind_index]]
                    decided.append(members)
                    mask = self._capped_piece_mask(state, self.vocab.kinds[kind_index])
                    if mask is not None:
                        refused.append(members[((mask.view(np.uint32)[members >> 5] >> (members & 31)) & 1) == 0])
                    reads += 1
                ids = ids[~small]
            opaque, shape = index.groups[2:] if table.unspaced else index.groups[:2]
            reads += self._read_keys(ids, opaque, state, table, decided, refused)
            if table.touched:  # tokens whose opaque reading consulted a quoted name's text
                ids = ids[np.isin(opaque.key[ids], list(table.touched))]
                ids, fresh_reads = self._read_fresh(ids, opaque, state, decided, refused)
                reads += fresh_reads + self._read_keys(ids, shape, state, None, decided, refused)
        self.stats["checked"] += reads
        if decided:
            table.record(np.concatenate(decided), np.concatenate(refused) if refused else None)

    def _read_keys(self, ids: np.ndarray[Any, Any], group: _KeyGroups, state: SqlScope,
                   table: _SignatureTable | None, decided: list[np.ndarray[Any, Any]],
                   refused: list[np.ndarray[Any, Any]]) -> int:
        """Read one token of `ids` [n] per key of `group` and append the ids of every token
        with that key to `decided` (and `refused` where the reading refuses). With `table`
        (opaque keys), a key in `table.touched` is skipped and a reading that consults a
        quoted name's text decides nothing: its key joins `table.touched`. Returns the
        number of readings."""
        unique, first = np.unique(group.key[ids], return_index=True)
        allowed: list[int] = []
        disallowed: list[int] = []
        reads = 0
        for key, token_id in zip(unique.tolist(), ids[first].tolist(), strict=True):
            if table is not None and key in table.touched:
                continue
            probe, accepted = self._probe(state, token_id)
            reads += 1
            if table is not None and probe.touched:
                table.touched.add(key)
            else:
                (allowed if accepted else disallowed).append(key)
        refused.append(members := group.members(disallowed))
        decided.extend((group.members(allowed), members))
        return reads

    def _read_fresh(self, ids: np.ndarray[Any, Any], group: _KeyGroups, state: SqlScope,
                    decided: list[np.ndarray[Any, Any]], refused: list[np.ndarray[Any, Any]],
                    ) -> tuple[np.ndarray[Any, Any], int]:
        """Of `ids` [n], the punctuation tokens closing one fresh quoted name
        (grammars.sql.mask.punct.known_names): read one per key of `group` (opaque: the name's
        text dropped) and append the verdict for those with that key to `decided` /
        `refused`. Returns the other ids and the number of readings."""
        names = self.vocab.name_of[ids]
        if not (names >= 0).any():
            return ids, 0
        known = [i for name in known_names(state) if (i := self.vocab.names.get(name)) is not None]
        fresh = (names >= 0) & ~np.isin(names, known)
        fresh_ids = ids[fresh]
        keys = group.key[fresh_ids]
        unique, first = np.unique(keys, return_index=True)
        disallowed = [key for key, token_id in zip(unique.tolist(), fresh_ids[first].tolist(), strict=True)
                      if not self._probe(state, token_id)[1]]
        decided.append(fresh_ids)
        refused.append(fresh_ids[np.isin(keys, disallowed)])
        return ids[~fresh], len(unique)

    def _blank_keeps(self, state: SqlScope) -> bool:
        """Whether reading " " here succeeds and leaves the signature unchanged."""
        probe = state.copy()
        return probe.feed(" ") and Hashed(probe.signature()) == self._signature()


class _SignatureTable:
    """The scope layer's verdicts at one signature over the whole vocabulary, as far as
    read (a token's verdict is a function of the signature: equal signatures read every text
    alike), kept as what a fill applies. `keep` [W] int32: the classes decided whole
    (big-kind pieces, blanks, operators, stop tokens; shared between tables); `passing` [W]
    uint32: keep less the other tokens refused (the row is ANDed with it); `undecided` [W]
    uint32: the tokens of this signature's mode that are read (`read`: inside a literal its
    closers, outside the unclassed tokens), less those with a verdict (the grammar's row
    ANDed with it is what a fill decides); `touched`: opaque-shape keys decided per shape
    instead; `unspaced`: the reading keys drop a leading " " here. Written under `lock`,
    `passing` before `undecided`, so a matcher sharing the table never sees a verdict
    half-recorded."""

    __slots__ = ("keep", "read", "passing", "undecided", "touched", "unspaced", "lock")

    def __init__(self, keep: np.ndarray[Any, Any], stops: np.ndarray[Any, Any], *,
                 decided: np.ndarray[Any, Any] | None, refused: np.ndarray[Any, Any] | None,
                 read: np.ndarray[Any, Any], unspaced: bool) -> None:  # [W] each
        self.keep = keep
        self.read = read
        kept = keep.view(np.uint32)
        self.passing = kept & ~refused if refused is not None else kept.copy()
        self.undecided = kept & ~stops & read  # stop tokens are `keep`'s
        if decided is not None:
            self.undecided &= ~decided
        self.touched: set[int] = set()
        self.unspaced = unspaced
        self.lock = threading.Lock()

    @property
    def refused(self) -> np.ndarray[Any, Any]:
        """[W] uint32: the tokens refused by a verdict (not by `keep`)."""
        return self.keep.view(np.uint32) & ~self.passing

    @property
    def decided(self) -> np.ndarray[Any, Any]:
        """[W] uint32: the tokens read here that have a verdict."""
        return self.keep.view(np.uint32) & self.read & ~self.undecided

    def record(self, decided: np.ndarray[Any, Any], refused: np.ndarray[Any, Any] | None) -> None:
        """Record verdicts: `decided` [n] token ids, of which `refused` [m] are refused."""
        words = len(self.passing)
        with self.lock:
            if refused is not None and len(refused):
                self.passing &= ~_bits(refused, words)
            self.undecided &= ~_bits(decided, words)


@dataclass(frozen=True, slots=True)
class _KeyGroups:
    """Tokens grouped by one reading-key map: `key` [V] int64 each token's key; `members(k)`
    the ids [m] of the tokens with key k (sorted by key once: `order`, `sorted_keys`)."""

    key: np.ndarray[Any, Any]
    order: np.ndarray[Any, Any]
    sorted_keys: np.ndarray[Any, Any]

    @classmethod
    def of(cls, key: np.ndarray[Any, Any]) -> _KeyGroups:
        order = np.argsort(key, kind="stable")
        return cls(key, order, key[order])

    def members(self, keys: list[int]) -> np.ndarray[Any, Any]:
        """The ids of the tokens whose key is one of `keys` (distinct)."""
        if not keys:
            return self.order[:0]
        wanted = np.asarray(keys, dtype=np.int64)
        lo = np.searchsorted(self.sorted_keys, wanted)
        counts = np.searchsorted(self.sorted_keys, wanted + 1) - lo
        starts = np.repeat(lo - np.cumsum(counts) + counts, counts)  # run i's start, less its offset
        return self.order[starts + np.arange(int(counts.sum()))]


@dataclass(frozen=True, slots=True)
class _RestIndex:
    """Per-vocabulary arrays for the tokens outside the classes decided whole."""

    small_ids: np.ndarray[Any, Any]  # [n] int64 ids of the word pieces of the small kinds
    is_small: np.ndarray[Any, Any]  # [V] bool: a word piece of a small kind
    kind_members: list[np.ndarray[Any, Any]]  # kind index -> [m] int64 positions in small_ids
    unclassed: np.ndarray[Any, Any]  # [W] uint32: tokens read outside a literal (not big pieces, blanks, operators)
    closing: dict[str, np.ndarray[Any, Any]]  # mode -> [W] uint32: tokens read inside that literal
    # mode -> reading key inside that literal: the reading shape of the text after the first
    # closer (-1: no closer); the text before it is the literal's, unread or a name's
    literal: dict[str, _KeyGroups]
    # reading keys: opaque shape, shape, and both less a leading " " (keys of one map apart)
    groups: tuple[_KeyGroups, _KeyGroups, _KeyGroups, _KeyGroups]
    # ScopedSqlMatcher._keep's rows by their inputs' key (with those inputs, kept alive)
    keeps: dict[tuple[object, ...], tuple[np.ndarray[Any, Any], list[Any]]]
    none: np.ndarray[Any, Any]  # [W] int32 zeros: no piece of a kind allowed


_INDEXES: weakref.WeakKeyDictionary[SqlVocab, _RestIndex] = weakref.WeakKeyDictionary()


def prepare_vocab(vocab: SqlVocab) -> None:
    """Build the mask layer's per-vocabulary index now (at compile time, off a request's
    first mask)."""
    vocab.prepare()
    _rest_index(vocab)


def _rest_index(vocab: SqlVocab) -> _RestIndex:
    """Built once per vocabulary (~0.35 s on Qwen2.5, Zen 4; a race builds it twice, harmlessly)."""
    index = _INDEXES.get(vocab)
    if index is None:
        small = vocab.kind_of >= len(BIG_KINDS)
        small_ids = np.flatnonzero(small).astype(np.int64)
        keys = {shape: int(key) for shape, key in zip(vocab.shape, vocab.shape_id.tolist(), strict=True)}
        unspaced = [keys.setdefault(shape[1:], len(keys)) if shape.startswith(" ") else keys[shape]
                    for shape in vocab.shape]
        opaque_keys: dict[str, int] = {}
        opaque = [opaque_keys.setdefault(opaque_shape(shape), len(opaque_keys)) for shape in vocab.shape]
        opaque_unspaced = [opaque_keys.setdefault(opaque_shape(shape[1:]), len(opaque_keys))
                           if shape.startswith(" ") else key for shape, key in zip(vocab.shape, opaque, strict=True)]
        kinds = vocab.kind_of[small_ids]
        members = [np.flatnonzero(kinds == kind) for kind in range(len(vocab.kinds))]
        closing = {mode: vocab.closing[closer].view(np.uint32) for mode, closer in _CLOSERS.items()}
        groups = tuple(_KeyGroups.of(np.asarray(keys, dtype=np.int64))
                       for keys in (opaque, vocab.shape_id, opaque_unspaced, unspaced))
        literal = {mode: _KeyGroups.of(_after_closer_keys(vocab, closer)) for mode, closer in _CLOSERS.items()}
        index = _INDEXES[vocab] = _RestIndex(small_ids, small, members, (~vocab.classed).view(np.uint32),
                                             closing, literal, groups, {},  # type: ignore[arg-type]
                                             np.zeros(vocab.num_words, dtype=np.int32))
    return index


def _after_closer_keys(vocab: SqlVocab, closer: str) -> np.ndarray[Any, Any]:
    """[V] int64: for a token containing `closer`, an id of the reading shape of its text
    after the first `closer`; -1 for the others."""
    keys = np.full(vocab.vocab_size, -1, dtype=np.int64)
    ids: dict[str, int] = {}
    for token_id in _token_ids(vocab.closing[closer].view(np.uint32)).tolist():
        text = vocab.text[token_id]
        keys[token_id] = ids.setdefault(reading_shape(text[text.index(closer) + 1:]), len(ids))
    return keys


def _token_ids(words: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The ids of the set bits of a 32-bit word mask [W], ascending: the words with a bit
    set, unpacked to bits (little-endian bit order, as the masks are laid out)."""
    hot = np.flatnonzero(words)  # [h]
    bits = np.unpackbits(words[hot].astype("<u4").view(np.uint8), bitorder="little")  # [32h]
    where = np.flatnonzero(bits.view(bool))  # a bool view: ~4x faster than on uint8
    return hot[where >> 5] * 32 + (where & 31)


def _bits(token_ids: np.ndarray[Any, Any], words: int) -> np.ndarray[Any, Any]:
    """[words] uint32 mask with the bits of `token_ids` [n] set."""
    return pack_ids(token_ids, words).view(np.uint32)


def sql_scope_schema(tables: dict[str, list[str]]) -> SqlSchema:
    """The scope layer's view of a schema (one per compiled grammar: its memo is shared)."""
    from grammars.sql.grammar import FUNCTIONS

    return SqlSchema(tables, FUNCTIONS)


def scoped_sql_matcher(inner: Matcher, *, schema: SqlSchema, vocab: SqlVocab) -> ScopedSqlMatcher:
    """`inner` (a schema-aware SQL grammar's matcher) with the scope layer on top."""
    return ScopedSqlMatcher(inner, schema=schema, vocab=vocab,
                            vocab_size=inner.vocab_size, stop_token_ids=inner.stop_token_ids,
                            encode=inner._encode)
