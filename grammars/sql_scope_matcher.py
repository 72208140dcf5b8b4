"""ScopedSqlMatcher: a schema-aware SQL grammar matcher whose masks also respect identifier scopes.

Contract (the Matcher contract of grammars.matcher, plus):
- wraps the grammar's own matcher (`inner`, e.g. the xgrammar one) and a `SqlScope` per
  accepted token (grammars.sql_scope); a token is accepted iff the grammar accepts it and the
  scope reader accepts its text with the word being typed still viable; a stop token iff the
  grammar is complete and the scope reader may end (every qualifier bound, ...).
- `fill_mask` is the grammar's mask ANDed with the scope layer's, exact over the whole
  vocabulary: word pieces (grammars.sql_vocab: ~84k tokens that are at most one separator
  and one identifier run) are restricted with precomputed groups, never a vocabulary loop;
  where any identifier but a glued alias may come (grammars.sql_glue), the glue prefixes are
  excluded the same way (a co-finite mask: pieces starting with a prefix, minus exceptions);
  every other token the grammar allows here is read by the scope reader once per opaque
  shape (sql_vocab.opaque_shape: a reading shape less the text of its quoted names; tokens
  whose reading consults that text, SqlScope.touched, once per reading shape), less a
  leading blank where reading a blank leaves the signature unchanged (equal signatures read
  every text alike), verdicts memoized in one dict
  per scope signature (entries counted against `_MEMO`); word pieces of the ~75 small kinds
  (~740 tokens) are found through a per-vocabulary index, not the whole row. A token is
  allowed iff `accept_token` would accept it.
- Never a dead end by construction of SqlScope: a prefix it lets through can always be
  completed (an alias can be any identifier, a bound qualifier exists after FROM, a table
  with the required columns exists before it, JOIN is always possible while FROM must go on).
- `rollback(n)` pops n scope states and rolls the inner matcher back: exact.
- `stats` counts fills, tokens read one by one and memo hits (pure counters).

Knows nothing of sampling, engines or HTTP.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from grammars.matcher import Matcher
from grammars.sql_scope import SqlSchema, SqlScope
from grammars.sql_vocab import BIG_KINDS, SqlVocab, opaque_shape

_MEMO = 1 << 17  # entries; the memo is cleared when it grows past this
_VERDICTS = ("verdict entries",)  # memo key: how many entries the per-signature verdict dicts hold
_CLOSER = {'"': '"', "`": "`", "[": "]"}
_UNREAD = object()  # a verdict not read yet
_OPAQUE = 1 << 40  # opaque-shape keys, apart from shape keys in one verdict dict


class _Signature:
    """A SqlScope signature with its hash computed once (signatures are nested tuples)."""

    __slots__ = ("value", "_hash")

    def __init__(self, value: tuple[object, ...]) -> None:
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, _Signature) and self._hash == other._hash
                                 and self.value == other.value)


class ScopedSqlMatcher(Matcher):
    def __init__(self, inner: Matcher, *, schema: SqlSchema, vocab: SqlVocab,
                 vocab_size: int, stop_token_ids: Sequence[int],
                 encode: Callable[[str], list[int]]) -> None:
        super().__init__(vocab_size=vocab_size, stop_token_ids=stop_token_ids, encode=encode)
        self.inner = inner
        self.vocab = vocab
        self._states = [SqlScope(schema)]
        self._signatures: list[_Signature | None] = [None]
        self._memo = schema.memo  # (signature, what) -> verdict / mask, shared by the grammar's matchers
        self.stats = {"fills": 0, "checked": 0, "memo_hits": 0}
        self._none = np.zeros(vocab.num_words, dtype=np.int32)
        self._stop_ids = np.asarray(sorted(self._stop_set), dtype=np.int64)

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

    def _signature(self) -> _Signature:
        """The current state's signature, with its hash computed once (a memo key)."""
        signature = self._signatures[-1]
        if signature is None:
            signature = self._signatures[-1] = _Signature(self._states[-1].signature())
        return signature

    # -- Matcher primitives -----------------------------------------------------------------
    def _accept(self, token_id: int) -> bool:
        after = self._reads(self._states[-1], token_id)
        if after is None or not self.inner._accept(token_id):
            return False
        self._states.append(after)
        self._signatures.append(None)
        return True

    def _rollback(self, num_tokens: int) -> None:
        self.inner._rollback(num_tokens)
        del self._states[len(self._states) - num_tokens:]
        del self._signatures[len(self._signatures) - num_tokens:]

    def _is_complete(self) -> bool:
        return self.inner._is_complete() and self._states[-1].can_end()

    def _jump_forward(self) -> str:
        return ""  # the grammar's forced text may break a scope rule; propose none

    def _fill(self, bitmask: torch.Tensor, row: int) -> None:  # bitmask [R, W] int32
        self.inner._fill(bitmask, row)
        self.stats["fills"] += 1
        words = bitmask[row].numpy()  # [W] int32, shares memory with the tensor
        state = self._states[-1]
        if not self._cached(("end",), state.can_end):
            for stop in self.stop_token_ids:
                _clear(words, stop)
        self._restrict_pieces(words, state)
        self._check_rest(words, state)

    def _remember(self, key: tuple[object, ...], value: Any) -> None:
        if len(self._memo) + self._memo.get(_VERDICTS, 0) > _MEMO:
            self._memo.clear()
        self._memo[key] = value

    def _grow(self, verdicts: int) -> None:
        """Count `verdicts` new entries of the per-signature verdict dicts against _MEMO."""
        if verdicts:
            self._memo[_VERDICTS] = self._memo.get(_VERDICTS, 0) + verdicts

    def _cached(self, what: tuple[object, ...], compute: Callable[[], Any]) -> Any:
        key = (self._signature(), *what)
        try:
            return self._memo[key]
        except KeyError:
            pass
        value = compute()
        self._remember(key, value)
        return value

    # -- helpers ----------------------------------------------------------------------------
    def _piece_mask(self, state: SqlScope, kind: str) -> np.ndarray[Any, Any] | None:
        """Allowed pieces of `kind` (a pre other than ""): None when all are, or all refused
        (an all-zero mask) when the pre itself breaks a rule."""
        return self._cached(("kind", kind), lambda: self._compute_piece_mask(state, kind))  # type: ignore[no-any-return]

    def _compute_piece_mask(self, state: SqlScope, kind: str) -> np.ndarray[Any, Any] | None:
        after = state.copy()
        if not after.feed(kind):
            return self._none
        allowed = after.word_set()
        if allowed is not None:
            return self.vocab.allowed(kind, "", allowed)
        block = after.word_block()
        return None if block is None else self.vocab.allowed_except(kind, "", *block)

    def _restrict_pieces(self, words: np.ndarray[Any, Any], state: SqlScope) -> None:
        vocab = self.vocab
        for kind in BIG_KINDS:
            if kind == "":
                typed = state.word
                if typed and typed[0].isdigit():
                    continue
                allowed = state.word_set_at_start if typed else self._cached(("set",), state.word_set)
                if allowed is not None:
                    words &= ~vocab.pieces[kind] | vocab.allowed(kind, typed.lower(), allowed)
                    continue
                block = state.word_block_at_start if typed else self._cached(("block",), state.word_block)
                if block is not None:  # the glued-alias rule (grammars.sql_glue): co-finite
                    words &= ~vocab.pieces[kind] | vocab.allowed_except(kind, typed.lower(), *block)
                continue
            mask = self._piece_mask(state, kind)
            if mask is not None:
                words &= ~vocab.pieces[kind] | mask

    def _check_rest(self, words: np.ndarray[Any, Any], state: SqlScope) -> None:
        vocab = self.vocab
        index = _rest_index(vocab)
        refused: list[np.ndarray[Any, Any]] = []
        if state.mode:  # inside a literal / quoted name: only a closing character matters
            rest = words & vocab.closing["'" if state.mode == "'" else _CLOSER[state.mode]]
        else:
            for cls, text in ((vocab.blank, " "), (vocab.ops, " =")):
                if not self._cached(("class", text), lambda text=text: state.copy().feed(text)):  # type: ignore[misc]
                    words &= ~cls
            rest = words & ~vocab.classed
            refused.extend(self._small_pieces(rest, state, index))
            rest &= ~index.small_mask
        ids = _token_ids(rest)  # [n] token ids the grammar allows, still to decide
        ids = ids[~np.isin(ids, self._stop_ids)]
        if len(ids):
            refused.extend(self._read_shapes(ids, state, index))
        if refused:
            _clear_many(words, np.concatenate(refused))

    def _small_pieces(self, rest: np.ndarray[Any, Any], state: SqlScope,
                      index: _RestIndex) -> list[np.ndarray[Any, Any]]:
        """The refused word pieces of the small kinds in `rest`: one reading per kind and
        signature, its verdicts kept for all the kind's pieces (_SmallVerdicts)."""
        present = ((rest.view(np.uint32)[index.small_words] >> index.small_shifts) & 1) == 1
        if not present.any():
            return []
        table: _SmallVerdicts = self._cached(("small",), lambda: _SmallVerdicts(index))
        kinds = np.unique(index.small_kinds[present])
        for kind_index in kinds[~table.known[kinds]].tolist():
            mask = self._piece_mask(state, self.vocab.kinds[kind_index])
            where = index.kind_members[kind_index]  # [m] positions in small_ids
            if mask is not None:
                members = index.small_ids[where]
                table.allowed[where] = ((mask[members >> 5] >> (members & 31)) & 1) == 1
            table.known[kind_index] = True  # after its verdicts: a sharing matcher reads them whole
        return [index.small_ids[present & ~table.allowed]]

    def _read_shapes(self, ids: np.ndarray[Any, Any], state: SqlScope,
                     index: _RestIndex) -> list[np.ndarray[Any, Any]]:
        """The refused tokens among `ids`: outside a literal, one reading per opaque shape
        (sql_vocab.opaque_shape: quoted names' text dropped), then one per shape for the
        tokens whose opaque reading consulted a quoted name's text; either shape less its
        leading " " where reading " " leaves the signature as it is (equal signatures read
        every text alike). Inside a literal, one reading per token. Verdicts memoized per
        signature."""
        verdicts: dict[int, bool | None] = self._cached(("verdicts",), dict)
        if state.mode:
            return [self._verdicts(-1 - ids, ids, state, verdicts, opaque=False)[0]]
        unspaced = self._cached(("blank keeps",), lambda: self._blank_keeps(state))
        opaque = index.opaque_unspaced[ids] if unspaced else index.opaque[ids]
        refused, touched = self._verdicts(opaque, ids, state, verdicts, opaque=True)
        if not len(touched):
            return [refused]
        keys = index.unspaced[touched] if unspaced else self.vocab.shape_id[touched]
        return [refused, self._verdicts(keys, touched, state, verdicts, opaque=False)[0]]

    def _verdicts(self, keys: np.ndarray[Any, Any], ids: np.ndarray[Any, Any], state: SqlScope,
                  verdicts: dict[int, bool | None], *,
                  opaque: bool) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """(refused ids, undecided ids) among `ids` [n] with reading keys `keys` [n]: one
        token read per key. With `opaque`, a reading that consulted a quoted name's text
        decides nothing for its key (verdict None: its ids are undecided)."""
        unique, first = np.unique(keys, return_index=True)
        refused, undecided, read = [], [], 0
        for key, token_id in zip(unique.tolist(), ids[first].tolist(), strict=True):
            verdict = verdicts.get(key, _UNREAD)
            if verdict is _UNREAD:
                probe, accepted = self._probe(state, token_id)
                verdict = verdicts[key] = None if opaque and probe.touched else accepted
                read += 1
            if verdict is None:
                undecided.append(key)
            elif not verdict:
                refused.append(key)
        self.stats["checked"] += read
        self.stats["memo_hits"] += len(unique) - read
        self._grow(read)
        return _members(ids, keys, refused), _members(ids, keys, undecided)

    def _blank_keeps(self, state: SqlScope) -> bool:
        """Whether reading " " here succeeds and leaves the signature unchanged."""
        probe = state.copy()
        return probe.feed(" ") and _Signature(probe.signature()) == self._signature()


@dataclass(frozen=True, slots=True)
class _RestIndex:
    """Per-vocabulary arrays for the tokens outside the big word-piece groups."""

    small_ids: np.ndarray[Any, Any]  # [n] int64 ids of the word pieces of the small kinds
    small_kinds: np.ndarray[Any, Any]  # [n] int32 their kind indices
    small_words: np.ndarray[Any, Any]  # [n] int64 their mask words (id >> 5)
    small_shifts: np.ndarray[Any, Any]  # [n] uint32 their bits in those words (id & 31)
    kind_members: list[np.ndarray[Any, Any]]  # kind index -> [m] int64 positions in small_ids
    small_mask: np.ndarray[Any, Any]  # [W] int32 word mask of small_ids
    unspaced: np.ndarray[Any, Any]  # [V] int64 shape key of the token's shape less a leading " "
    opaque: np.ndarray[Any, Any]  # [V] int64 key of the token's opaque shape (>= _OPAQUE)
    opaque_unspaced: np.ndarray[Any, Any]  # [V] int64 the same, less a leading " "


class _SmallVerdicts:
    """Per signature: which small kinds were read (`known` [kinds] bool) and, for their
    pieces, which are allowed (`allowed` [n] bool over _RestIndex.small_ids; True where the
    kind is unread, so only read kinds refuse)."""

    __slots__ = ("known", "allowed")

    def __init__(self, index: _RestIndex) -> None:
        self.known = np.zeros(len(index.kind_members), dtype=bool)
        self.allowed = np.ones(len(index.small_ids), dtype=bool)


_INDEXES: weakref.WeakKeyDictionary[SqlVocab, _RestIndex] = weakref.WeakKeyDictionary()


def prepare_vocab(vocab: SqlVocab) -> None:
    """Build the mask layer's per-vocabulary index now (at compile time, off a request's
    first mask)."""
    _rest_index(vocab)


def _rest_index(vocab: SqlVocab) -> _RestIndex:
    """Built once per vocabulary (~0.2 s; a race builds it twice, harmlessly)."""
    index = _INDEXES.get(vocab)
    if index is None:
        small_ids = np.flatnonzero(vocab.kind_of >= len(BIG_KINDS)).astype(np.int64)
        keys = {shape: int(key) for shape, key in zip(vocab.shape, vocab.shape_id.tolist(), strict=True)}
        unspaced = [keys.setdefault(shape[1:], len(keys)) if shape.startswith(" ") else keys[shape]
                    for shape in vocab.shape]
        opaque_keys: dict[str, int] = {}
        opaque = [opaque_keys.setdefault(opaque_shape(shape), _OPAQUE + len(opaque_keys)) for shape in vocab.shape]
        opaque_unspaced = [opaque_keys.setdefault(opaque_shape(shape[1:]), _OPAQUE + len(opaque_keys))
                           if shape.startswith(" ") else key for shape, key in zip(vocab.shape, opaque, strict=True)]
        mask = np.zeros(vocab.num_words, dtype=np.uint32)
        np.bitwise_or.at(mask, small_ids >> 5, np.left_shift(np.uint32(1), (small_ids & 31).astype(np.uint32)))
        kinds = vocab.kind_of[small_ids]
        members = [np.flatnonzero(kinds == kind) for kind in range(len(vocab.kinds))]
        index = _INDEXES[vocab] = _RestIndex(small_ids, kinds, small_ids >> 5, (small_ids & 31).astype(np.uint32),
                                             members, mask.view(np.int32),
                                             np.asarray(unspaced, dtype=np.int64),
                                             np.asarray(opaque, dtype=np.int64),
                                             np.asarray(opaque_unspaced, dtype=np.int64))
    return index


def _members(ids: np.ndarray[Any, Any], keys: np.ndarray[Any, Any], chosen: list[int]) -> np.ndarray[Any, Any]:
    """The ids [n] whose keys [n] are among `chosen`."""
    return ids[np.isin(keys, chosen)] if chosen else ids[:0]


def _token_ids(words: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The ids of the set bits of an int32 word mask [W], in no particular order: one pass
    per bit of the fullest word (lowest set bits first), not one per bit of the mask."""
    hot = np.flatnonzero(words)
    bits = words[hot].view(np.uint32).astype(np.int64)
    out = []
    while len(hot):
        low = bits & -bits
        out.append(hot * 32 + np.frexp(low.astype(np.float64))[1] - 1)  # log2 of a power of two
        bits ^= low
        more = bits != 0
        hot, bits = hot[more], bits[more]
    return np.concatenate(out) if out else hot


def _clear_many(words: np.ndarray[Any, Any], token_ids: np.ndarray[Any, Any]) -> None:
    if len(token_ids):
        np.bitwise_and.at(words.view(np.uint32), token_ids >> 5,
                          ~np.left_shift(np.uint32(1), (token_ids & 31).astype(np.uint32)))


def _clear(words: np.ndarray[Any, Any], token_id: int) -> None:  # words: int32 [W]
    view = words.view(np.uint32)
    view[token_id >> 5] &= np.uint32(~(1 << (token_id & 31)) & 0xFFFFFFFF)


def sql_scope_schema(tables: dict[str, list[str]]) -> SqlSchema:
    """The scope layer's view of a schema (one per compiled grammar: its memo is shared)."""
    from grammars.sql import FUNCTIONS

    return SqlSchema(tables, FUNCTIONS)


def scoped_sql_matcher(inner: Matcher, *, schema: SqlSchema, vocab: SqlVocab) -> ScopedSqlMatcher:
    """`inner` (a schema-aware SQL grammar's matcher) with the scope layer on top."""
    return ScopedSqlMatcher(inner, schema=schema, vocab=vocab,
                            vocab_size=inner.vocab_size, stop_token_ids=inner.stop_token_ids,
                            encode=inner._encode)
