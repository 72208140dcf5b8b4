"""SqlVocab's whole-vocabulary masks (grammars.sql.mask.vocab) against a scan of every token: the
word pieces `allowed` keeps, and `pack_ids` on both of its paths (scatter, packed bool row)."""

from __future__ import annotations

import random
import re
from typing import Any

import numpy as np
import pytest

from grammars import spec_from_request
from grammars.sql.mask.vocab import BIG_KINDS, SqlVocab, pack_ids
from tests.conftest import DATA

SPIDER = DATA / "text2sql" / "spider"
_PIECE = re.compile(r"([^A-Za-z0-9_$]*)([A-Za-z0-9_$]+)\Z")


@pytest.fixture(scope="module")
def vocab(xgr_compiler: Any) -> SqlVocab:
    ddl = (SPIDER / "ddl" / "concert_singer.sql").read_text()
    compiled = xgr_compiler.compile(spec_from_request({"response_format": {"type": "sql", "sql": {"schema": ddl}}}))
    return compiled.matcher().vocab  # type: ignore[no-any-return]


def _ids(mask: np.ndarray[Any, Any]) -> set[int]:
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")
    return set(np.flatnonzero(bits).tolist())


@pytest.mark.parametrize("words", [32 * 4 - 1, 32 * 4, 32 * 4 + 1])
def test_pack_ids_sets_exactly_the_given_bits_on_both_paths(words: int) -> None:
    size = (words - 1) * 32 + 1  # the last word holds one bit
    rng = random.Random(words)
    for count in (0, 1, 1023, 1024, 1025, min(size, 3000)):
        ids = [rng.randrange(size) for _ in range(count)] + ([size - 1] if count else [])  # repeats too
        mask = pack_ids(np.asarray(ids, dtype=np.int64), words)
        assert mask.dtype == np.int32 and mask.shape == (words,)
        assert _ids(mask) == set(ids), count


def test_allowed_keeps_exactly_the_pieces_that_stay_a_prefix_of_a_word(vocab: SqlVocab) -> None:
    words = frozenset({"name", "names", "nation", "singer_id", "song_name", "age", "a", "count", "x9"})
    pieces: dict[str, list[tuple[int, str]]] = {kind: [] for kind in BIG_KINDS}
    for token_id, text in enumerate(vocab.text):
        match = _PIECE.match(text)
        if match is not None and vocab.kind_of[token_id] >= 0 and vocab.kinds[vocab.kind_of[token_id]] in pieces:
            pieces[vocab.kinds[vocab.kind_of[token_id]]].append((token_id, match.group(2).lower()))
    cases = [(kind, "", words) for kind in BIG_KINDS]
    cases += [("", typed, words) for typed in ("n", "na", "nam", "name", "names", "s", "singer_", "zz")]
    cases += [(" ", "", frozenset()), ("", "a", frozenset({"a"}))]
    for kind, typed, allowed_words in cases:
        got = _ids(vocab.allowed(kind, typed, allowed_words)) & {token_id for token_id, _ in pieces[kind]}
        want = {token_id for token_id, word in pieces[kind]
                if any(w.startswith(typed + word) for w in allowed_words) or (not typed and word[0].isdigit())}
        assert got == want, (kind, typed, sorted(got ^ want)[:5])
        assert vocab.allowed(kind, typed, allowed_words) is vocab.allowed(kind, typed, allowed_words)  # cached
