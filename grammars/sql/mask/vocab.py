"""SqlVocab: a tokenizer's vocabulary seen as SQL words, built once per tokenizer for the scope mask.

Contract: `SqlVocab(decoded_vocab, vocab_size=)` reads each token's text (bytes, decoded with
replacement) once. A token is a *word piece* of kind k when its text is `pre + word` with
`word` one run of identifier characters ([A-Za-z0-9_$]) reaching the end of the token and
k = `canonical_pre(pre)` (whitespace runs as " ", other non-structural runs as "="; SqlScope
reads a pre and its canonical form alike): "" (the word continues the one being typed, or
starts right here), " ", ".", "(", "=", ",", "'", ... On the Qwen2.5 vocabulary ~92k of 152k
tokens are word pieces, the bulk of what a grammar allows at an identifier position; the
other tokens (punctuation, several words, a word followed by more text) are read one by one
by the mask layer (grammars.sql.mask.matcher), cheap because a SQL grammar allows few.

- `kind_of[i]` is token i's kind index into `kinds` (-1: not a word piece); `pieces[k]` the
  int32 word mask [W] of the pieces of the four big kinds ("", " ", ".", "(");
- `allowed(k, typed, words)` is the int32 word mask [W] of the word pieces of kind k that keep
  `typed + word` a prefix of one of `words` (lower case; `typed` is the part of the word
  already generated, "" for kinds other than ""), plus `digits[k]` when `typed` is "": a
  union of precomputed groups (one per (kind, lower-cased word)), never a loop over the
  vocabulary; results are cached (LRU, bounded). Pieces whose word starts with a digit
  (numbers) are always in it when `typed` is "" (the scope layer never restricts numbers).
- `allowed_except(k, typed, prefixes, exceptions)` is the co-finite counterpart (the
  glued-alias rule, grammars.sql.glue): an int32 mask [W] that, ANDed with the pieces of kind
  k, keeps those for which `typed + word` has no prefix in `prefixes` or is a prefix of one of
  `exceptions` (its bits outside kind k mean nothing: AND it with kind k's pieces). Built from the
  pieces of kind k whose word starts with a given string (a range of the kind's sorted words,
  indexed by `prepare()` or on first use) and `allowed`; cached like it.
- `checked_tails(kinds, names)` and `inside_checked(closer, typed, names)`: the masks of a
  checked quoted name (grammars.sql.scope.SqlScope.quoted_choices), cached like `allowed`.
- `closing[c]` (c one of ' " ` ]) is the int32 word mask [W] of the tokens containing c: inside
  a literal or quoted name, only those can change what SqlScope reads; `blank` the tokens
  that are whitespace only and `ops` those made of whitespace and operator characters
  (=<>!+-/%|&~^, at least one): each class reads like one representative (" ", " =").
- `punct_kind[i]` is token i's punctuation kind (grammars.sql.mask.punct; -1: none, also for the
  classes above); `punct_mask(kinds)` the int32 word mask [W] of the tokens of those kinds
  (cached like `allowed`); `name_of[i]` the id in `names` of the one quoted name punctuation
  token i closes (-1: none or several; grammars.sql.mask.punct.punctuation).
- `word_len[i]` is the length of word piece i's identifier run (0: not a piece),
  `leads_digit[i]` whether that run starts with a digit; `within(kind, limit, numbers=)` the
  int32 word mask [W] clearing the pieces of kind k whose word is longer than `limit`, those
  starting with a digit only with `numbers` (a piece continuing a word), every other bit set:
  the word cap (SqlScope's `max_word`) decided whole, cached like `allowed`;
  `numbers_within(kind, limit)` the same for the pieces starting with a digit only (a number
  the piece starts: SqlScope's MAX_NUMBER), `longest(kind)` / `longest_number(kind)` the
  longest word of the kind's pieces / of those starting with a digit.
- `pack_ids(ids, words)` is the int32 word mask [words] of a list of token ids.
- `text[i]` is token i's text ("" past the decoded vocabulary); `shape[i]` = `reading_shape`:
  two tokens with one shape read the same to SqlScope from any state outside a literal;
  `opaque_shape(shape)` drops the text of its quoted names as well: two tokens with one
  opaque shape read the same from any state where the reading leaves SqlScope.touched False.

Knows nothing of grammars, matchers or HTTP.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from grammars.sql.mask.punct import KINDS, open_tail, punctuation
from grammars.sql.scope import QuotedNames

BIG_KINDS = ("", " ", ".", "(", "=", ",")  # the kinds with a whole-vocabulary mask
_PIECE = re.compile(r"([^A-Za-z0-9_$]*)([A-Za-z0-9_$]+)\Z")
_STRUCTURAL = frozenset(".(),;*'\"`[]")
IDENT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")
_BLANK = re.compile(r"\s+\Z")
_OPS = re.compile(r"[\s=<>!+\-/%|&~^]*[=<>!+\-/%|&~^][\s=<>!+\-/%|&~^]*\Z")
CLOSERS = ("'", '"', "`", "]")
_CACHE = 4096
_PREFIXES = 1 << 16  # SqlVocab._prefix_ids entries; cleared when it grows past this
_PACK_FROM = 1024  # ids packed at once from which a bool row + packbits beats a scatter


def pack_ids(ids: npt.NDArray[np.int64], words: int) -> npt.NDArray[np.int32]:
    """int32 word mask [words] with the bits of `ids` [n] set (repeats allowed)."""
    if len(ids) >= _PACK_FROM:
        row = np.zeros(words * 32, dtype=bool)
        row[ids] = True
        return np.packbits(row, bitorder="little").view(np.int32)
    out = np.zeros(words, dtype=np.uint32)
    if len(ids):
        np.bitwise_or.at(out, ids >> 5, np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)))
    return out.view(np.int32)


def canonical_pre(pre: str) -> str:
    """`pre` as SqlScope reads it before a word: a whitespace-only pre is " "; otherwise
    whitespace outside quotes is dropped (it only ends the word being typed, as the next
    character does anyway) and runs of other non-structural characters (operators,
    non-ASCII) become one "="."""
    if pre and pre.isspace():
        return " "
    out: list[str] = []
    closer = ""
    for ch in pre:
        if closer:
            out.append(ch)
            closer = "" if ch == closer else closer
            continue
        if ch.isspace():
            continue
        c = ch if ch in _STRUCTURAL else "="
        if c == "=" and out and out[-1] == "=":
            continue
        out.append(c)
        closer = _OPEN.get(ch, "")
    return "".join(out)


_OPEN = {"'": "'", '"': '"', "`": "`", "[": "]"}


def reading_shape(text: str) -> str:
    """`text` as SqlScope reads it from outside a literal: identifier runs lower-cased,
    whitespace runs as " ", other non-structural runs as "=", the content of a '...' literal
    dropped (only its quotes kept), a quoted name's kept (ASCII lower-cased), closed or not
    (an unclosed one's text is read as it is typed where SqlScope.quoted_choices checks it)."""
    out: list[str] = []
    closer = ""
    for ch in text:
        if closer:
            if ch == closer:
                out.append(ch)
                closer = ""
            elif closer != "'":  # a quoted name: its text matters (ASCII case folded, as sqlite's)
                out.append(ch.lower() if ch.isascii() else ch)
            continue
        if ch in IDENT:
            out.append(ch.lower())
            continue
        c = " " if ch.isspace() else ch if ch in _STRUCTURAL else "="
        if out and c in " =" and out[-1] == c:
            continue
        out.append(c)
        closer = _OPEN.get(ch, "")
    return "".join(out)


def opaque_shape(shape: str) -> str:
    """A reading shape with the text of each closed quoted name dropped (`"x"` -> `""`, also
    `` `x` `` and `[x]`) unless a `.` follows it (`"x".`: a qualifier, whose text matters);
    an unclosed `[` / `` ` `` name's text is kept, an unclosed `"` one's dropped (read only
    where checked: SqlScope.quoted_choices, which sets touched).
    Texts of one opaque shape read alike from any state where reading them consults no
    quoted name's text (SqlScope.touched stays False): elsewhere the name is an opaque
    operand, forgotten at the next character."""
    if '"' not in shape and "`" not in shape and "[" not in shape:
        return shape  # no quoted name (most shapes): nothing to drop
    out: list[str] = []
    closer = ""
    opened = 0
    for index, ch in enumerate(shape):
        if closer:
            if ch != closer:
                continue
            closer = ""
            if shape[index + 1 : index + 2] == ".":
                out.append(shape[opened:index])
        elif ch in _OPEN and ch != "'":
            closer, opened = _OPEN[ch], index + 1
        out.append(ch)
    if closer and closer != '"':
        out.append(shape[opened:])
    return "".join(out)


class SqlVocab:
    def __init__(self, decoded_vocab: Sequence[bytes], *, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.num_words = (vocab_size + 31) // 32
        self.text: list[str] = [""] * vocab_size
        self.shape: list[str] = [""] * vocab_size
        groups: dict[tuple[str, str], list[int]] = {}
        members: dict[str, list[int]] = {kind: [] for kind in BIG_KINDS}
        digits: dict[str, list[int]] = {}
        kind_index: dict[str, int] = {kind: i for i, kind in enumerate(BIG_KINDS)}
        self.kind_of = np.full(vocab_size, -1, dtype=np.int32)  # [V] kind index, -1: not a piece
        closing: dict[str, list[int]] = {c: [] for c in CLOSERS}
        self.word_len = np.zeros(vocab_size, dtype=np.int32)  # [V] identifier run of a word piece (0: none)
        self.leads_digit = np.zeros(vocab_size, dtype=bool)  # [V] a word piece whose run starts with a digit
        blank: list[int] = []
        ops: list[int] = []
        for token_id, raw in enumerate(decoded_vocab[:vocab_size]):
            text = raw.decode("utf-8", errors="replace")
            self.text[token_id] = text
            self.shape[token_id] = reading_shape(text)
            for closer in CLOSERS:
                if closer in text:
                    closing[closer].append(token_id)
            if _BLANK.match(text):
                blank.append(token_id)
            elif _OPS.match(text):
                ops.append(token_id)
            match = _PIECE.match(text)
            if match is None:
                continue
            kind, word = canonical_pre(match.group(1)), match.group(2)
            self.kind_of[token_id] = kind_index.setdefault(kind, len(kind_index))
            groups.setdefault((kind, word.lower()), []).append(token_id)
            if kind in members:
                members[kind].append(token_id)
            self.word_len[token_id] = len(word)
            if word[0].isdigit():
                digits.setdefault(kind, []).append(token_id)
                self.leads_digit[token_id] = True
        words = self.num_words
        self._groups = {key: np.asarray(ids, dtype=np.int64) for key, ids in groups.items()}
        self.kinds = list(kind_index)  # kind index -> canonical pre
        self.pieces = {kind: pack_ids(np.asarray(members[kind], dtype=np.int64), words) for kind in BIG_KINDS}
        self._digits = {kind: pack_ids(np.asarray(ids, dtype=np.int64), words) for kind, ids in digits.items()}
        self._no_digits = np.zeros(words, dtype=np.int32)
        self.any_piece = np.bitwise_or.reduce([self.pieces[kind] for kind in BIG_KINDS])
        self.closing = {c: pack_ids(np.asarray(closing[c], dtype=np.int64), words) for c in CLOSERS}
        self.blank = pack_ids(np.asarray(blank, dtype=np.int64), words)
        self.ops = pack_ids(np.asarray(ops, dtype=np.int64), words)
        self.classed = self.any_piece | self.blank | self.ops
        scans = [punctuation(text) for text in self.text]  # (kind, closed quoted names) per token
        self.punct_kind = np.asarray([kind for kind, _ in scans], dtype=np.int8)  # [V]
        self.punct_kind[np.unpackbits(self.classed.view(np.uint8), bitorder="little")[:vocab_size].view(bool)] = -1
        self._punct_ids = [np.flatnonzero(self.punct_kind == kind) for kind in range(KINDS)]
        self.names: dict[str, int] = {}  # quoted name -> id
        self.name_of = np.full(vocab_size, -1, dtype=np.int32)  # [V] id of the one name a punctuation token closes
        for token_id in np.flatnonzero(self.punct_kind >= 0).tolist():
            names = scans[token_id][1]
            if len(names) == 1:
                self.name_of[token_id] = self.names.setdefault(names[0], len(self.names))
        # punctuation tokens ending inside their one `[` / `` ` `` name: (id, opener, its text
        # lower-cased, None when not ASCII: never a checked name's)
        self._tails = [(token_id, tail[0], tail[1].lower() if tail[1].isascii() else None)
                       for token_id in np.flatnonzero(self.punct_kind >= 0).tolist()
                       if (tail := open_tail(self.text[token_id])) is not None]
        self._lowered: dict[str, list[int]] | None = None  # ASCII text lower-cased -> ids
        self._before: dict[str, dict[str, list[int]]] = {}  # closer -> ASCII text before it, lowered -> ids
        shape_ids: dict[str, int] = {}
        self.shape_id = np.asarray([shape_ids.setdefault(shape, len(shape_ids)) for shape in self.shape],
                                   dtype=np.int64)  # [V] id of the token's reading shape
        self._longest: dict[str, int] = {}
        self._cache: OrderedDict[tuple[object, ...], npt.NDArray[np.int32]] = OrderedDict()
        self._prefixes: dict[tuple[str, str], npt.NDArray[np.int64]] = {}
        self._sorted: dict[str, tuple[list[str], npt.NDArray[np.int64], npt.NDArray[np.int64]]] = {}

    def _hit(self, key: tuple[object, ...]) -> npt.NDArray[np.int32] | None:
        hit = self._cache.get(key)
        if hit is not None:
            try:
                self._cache.move_to_end(key)
            except KeyError:  # evicted meanwhile by another thread's matcher
                pass
        return hit

    def _store(self, key: tuple[object, ...], mask: npt.NDArray[np.int32]) -> None:
        self._cache[key] = mask
        if len(self._cache) > _CACHE:
            try:
                self._cache.popitem(last=False)
            except KeyError:
                pass

    def longest(self, kind: str) -> int:
        """The longest word of the pieces of `kind`."""
        longest = self._longest.get(kind)
        if longest is None:
            ids = np.flatnonzero(self.kind_of == self.kinds.index(kind)) if kind in self.kinds else ()
            longest = self._longest[kind] = int(self.word_len[ids].max()) if len(ids) else 0
        return longest

    def within(self, kind: str, limit: int, *, numbers: bool) -> npt.NDArray[np.int32]:
        """int32 mask [W]: every bit set but the pieces of `kind` whose word is longer than
        `limit` (those starting with a digit only with `numbers`)."""
        key = ("within", kind, limit, numbers)
        hit = self._hit(key)
        if hit is not None:
            return hit
        over = (self.word_len > max(limit, 0)) & (self.kind_of == self.kinds.index(kind))
        ids = np.flatnonzero(over if numbers else over & ~self.leads_digit)
        mask = ~pack_ids(ids.astype(np.int64), self.num_words)
        self._store(key, mask)
        return mask

    def longest_number(self, kind: str) -> int:
        """The longest word of the pieces of `kind` whose word starts with a digit."""
        key = "0" + kind
        longest = self._longest.get(key)
        if longest is None:
            ids = (np.flatnonzero((self.kind_of == self.kinds.index(kind)) & self.leads_digit)
                   if kind in self.kinds else ())
            longest = self._longest[key] = int(self.word_len[ids].max()) if len(ids) else 0
        return longest

    def numbers_within(self, kind: str, limit: int) -> npt.NDArray[np.int32]:
        """int32 mask [W]: every bit set but the pieces of `kind` whose word starts with a
        digit and is longer than `limit`."""
        key = ("numbers_within", kind, limit)
        hit = self._hit(key)
        if hit is not None:
            return hit
        over = (self.word_len > max(limit, 0)) & (self.kind_of == self.kinds.index(kind)) & self.leads_digit
        mask = ~pack_ids(np.flatnonzero(over).astype(np.int64), self.num_words)
        self._store(key, mask)
        return mask

    def prepare(self) -> None:
        """Index the big kinds' words now (~0.17 s on Qwen2.5, Zen 4), not at a mask's first use."""
        for kind in BIG_KINDS:
            self._sorted_words(kind)

    def _sorted_words(self, kind: str) -> tuple[list[str], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The words of `kind` sorted, the offsets of their groups, their ids in that order."""
        index = self._sorted.get(kind)
        if index is None:
            words = sorted(word for k, word in self._groups if k == kind)
            groups = [self._groups[(kind, word)] for word in words]
            offsets = np.cumsum([0] + [len(g) for g in groups]).astype(np.int64)
            ids = np.concatenate(groups) if groups else np.zeros(0, dtype=np.int64)
            index = self._sorted[kind] = (words, offsets, ids)
        return index

    def _starting_with(self, kind: str, start: str) -> npt.NDArray[np.int64]:
        """Ids of the pieces of `kind` whose lower-cased word starts with `start`."""
        words, offsets, ids = self._sorted_words(kind)
        lo, hi = bisect_left(words, start), bisect_left(words, start + "\x7f")  # words are ASCII
        return ids[offsets[lo] : offsets[hi]]

    def allowed_except(self, kind: str, typed: str, prefixes: frozenset[str],
                       exceptions: frozenset[str]) -> npt.NDArray[np.int32]:
        """Mask keeping the pieces of `kind` for which `typed + word` has no prefix in
        `prefixes` or is a prefix of one of `exceptions` (see the module docstring)."""
        key = ("except", kind, typed, prefixes, exceptions)
        hit = self._hit(key)
        if hit is not None:
            return hit
        spared = self.allowed(kind, typed, exceptions) if exceptions else self._no_digits
        if any(typed.startswith(prefix) for prefix in prefixes):
            mask = spared  # glued already: only the way to an exception is left
        else:
            rests = {prefix[len(typed):] for prefix in prefixes
                     if len(prefix) > len(typed) and prefix.startswith(typed)}
            ids = [self._starting_with(kind, rest) for rest in rests]
            refused = pack_ids(np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64), self.num_words)
            mask = ~refused | spared
        self._store(key, mask)
        return mask

    def _prefix_ids(self, kind: str, rest: str) -> npt.NDArray[np.int64]:
        """Ids of the pieces of `kind` whose lower-cased word is a non-empty prefix of `rest`
        (kept per (kind, rest): a schema's names recur at every position)."""
        hit = self._prefixes.get((kind, rest))
        if hit is None:
            groups = [group for end in range(1, len(rest) + 1)
                      if (group := self._groups.get((kind, rest[:end]))) is not None]
            hit = np.concatenate(groups) if groups else np.zeros(0, dtype=np.int64)
            if len(self._prefixes) >= _PREFIXES:
                self._prefixes.clear()
            self._prefixes[(kind, rest)] = hit
        return hit

    def punct_mask(self, kinds: frozenset[int]) -> npt.NDArray[np.int32]:
        """The tokens whose punctuation kind is one of `kinds`."""
        key = ("punct", kinds)
        hit = self._hit(key)
        if hit is None:
            ids = [self._punct_ids[kind] for kind in kinds]
            hit = pack_ids(np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64), self.num_words)
            self._store(key, hit)
        return hit

    def checked_tails(self, kinds: frozenset[int], names: dict[str, QuotedNames],
                      ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
        """(decided, refused) int32 masks [W] of the punctuation tokens of `kinds` that end
        inside their one `[` / `` ` `` name (grammars.sql.mask.punct.checked_kinds): refused
        unless the name's text (ASCII, lower-cased) is one of `names[opener].prefixes`."""
        key = ("tails", kinds, tuple(sorted(names.items())))
        hit = self._hit(key)
        if hit is None:
            decided, refused = [], []
            for token_id, opener, tail in self._tails:
                if int(self.punct_kind[token_id]) in kinds:
                    decided.append(token_id)
                    if tail is None or tail not in names[opener].prefixes:
                        refused.append(token_id)
            hit = np.stack([pack_ids(np.asarray(ids, dtype=np.int64), self.num_words) for ids in (decided, refused)])
            self._store(key, hit)
        return hit[0], hit[1]

    def inside_checked(self, closer: str, typed: str, names: QuotedNames) -> npt.NDArray[np.int32]:
        """int32 mask [W] of the tokens that may come inside a checked quoted name (SqlScope
        .quoted_choices) with `typed` (lower case) typed: ASCII texts keeping it a prefix of
        one of `names.names`, and the tokens holding `closer` whose ASCII text before it
        completes one (what follows the closer is not looked at)."""
        key = ("inside", closer, typed, names)
        hit = self._hit(key)
        if hit is not None:
            return hit
        if self._lowered is None:
            lowered: dict[str, list[int]] = {}
            for token_id, text in enumerate(self.text):
                if text and text.isascii():
                    lowered.setdefault(text.lower(), []).append(token_id)
            self._lowered = lowered
        before = self._before.get(closer)
        if before is None:
            before = self._before[closer] = {}
            for token_id, text in enumerate(self.text):
                head = text.split(closer, 1)[0]
                if len(head) < len(text) and head.isascii():
                    before.setdefault(head.lower(), []).append(token_id)
        rests = [name[len(typed):] for name in names.names if name.startswith(typed)]
        ids = [token_id for text in {rest[:end] for rest in rests for end in range(1, len(rest) + 1)}
               for token_id in self._lowered.get(text, ())]
        ids += [token_id for rest in set(rests) for token_id in before.get(rest, ())]
        hit = pack_ids(np.asarray(ids, dtype=np.int64), self.num_words)
        self._store(key, hit)
        return hit

    def allowed(self, kind: str, typed: str, words: frozenset[str], *, numbers: bool = True) -> npt.NDArray[np.int32]:
        """Word pieces of `kind` that keep `typed + word` a prefix of one of `words` (and,
        with `numbers`, those starting with a digit when `typed` is "")."""
        key = (kind, typed, words, numbers)
        hit = self._hit(key)
        if hit is not None:
            return hit
        start = len(typed)
        ids = [self._prefix_ids(kind, word[start:]) for word in words
               if len(word) > start and word.startswith(typed)]
        mask = pack_ids(np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64), self.num_words)
        if not typed and numbers:
            mask = mask | self._digits.get(kind, self._no_digits)
        self._store(key, mask)
        return mask
