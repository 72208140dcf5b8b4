"""Packed int32 bitmask helpers: layout, round trips, widths, in-place application."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sampler import allocate_token_bitmask, apply_token_bitmask_, pack_bitmask, unpack_bitmask


def _loop_allowed(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Obvious per-bit reference: token t allowed ⇔ bit t%32 of word t//32 (missing word ⇒ 0)."""
    rows, words = bitmask.shape
    out = torch.zeros(rows, vocab_size, dtype=torch.bool)
    for r in range(rows):
        for t in range(vocab_size):
            if t // 32 < words:
                out[r, t] = bool((int(bitmask[r, t // 32]) >> (t % 32)) & 1)
    return out


def test_layout_bit_j_of_word_i_is_token_32i_plus_j() -> None:
    allowed = torch.zeros(1, 70, dtype=torch.bool)
    allowed[0, [0, 31, 32, 69]] = True
    packed = pack_bitmask(allowed)
    assert packed.dtype == torch.int32 and packed.shape == (1, 3)
    assert packed[0].tolist() == [1 - 2**31, 1, 1 << 5]  # bit 31 is the sign bit


@pytest.mark.parametrize("vocab", [1, 31, 32, 33, 63, 64, 65, 95, 96, 97])
def test_allocate_is_all_allowed(vocab: int) -> None:
    bitmask = allocate_token_bitmask(3, vocab)
    assert bitmask.shape == (3, (vocab + 31) // 32) and bitmask.dtype == torch.int32
    assert (bitmask == -1).all()
    assert unpack_bitmask(bitmask, vocab).all()


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(0, 4), vocab=st.integers(1, 200), seed=st.integers(0, 2**16))
def test_pack_unpack_round_trip(rows: int, vocab: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    allowed = torch.rand(rows, vocab, generator=gen) < 0.5
    packed = pack_bitmask(allowed)
    assert packed.shape == (rows, (vocab + 31) // 32)
    assert torch.equal(unpack_bitmask(packed, vocab), allowed)
    assert torch.equal(unpack_bitmask(packed, vocab), _loop_allowed(packed, vocab))


def test_unpack_with_too_few_or_too_many_words() -> None:
    gen = torch.Generator().manual_seed(0)
    bitmask = torch.randint(-(2**31), 2**31 - 1, (2, 3), generator=gen, dtype=torch.int32)
    assert torch.equal(unpack_bitmask(bitmask, 130), _loop_allowed(bitmask, 130))  # too few
    assert not unpack_bitmask(bitmask, 130)[:, 96:].any()
    assert torch.equal(unpack_bitmask(bitmask, 40), _loop_allowed(bitmask, 40))  # too many


@pytest.mark.parametrize(
    ("width", "vocab_size", "words"),
    [
        (40, None, 2),  # exact
        (64, 37, 2),  # logits wider than the tokenizer vocabulary
        (96, 65, 1),  # bitmask with too few words: the rest is disallowed
        (33, 33, 4),  # bitmask with extra words
        (31, 31, 1),
    ],
)
def test_apply_matches_reference(width: int, vocab_size: int | None, words: int) -> None:
    gen = torch.Generator().manual_seed(width)
    logits = torch.randn(3, width, generator=gen)
    bitmask = torch.randint(-(2**31), 2**31 - 1, (3, words), generator=gen, dtype=torch.int32)
    bitmask[0] = -1  # an all-allowed row still loses ids past vocab_size
    expected = logits.clone()
    allowed = _loop_allowed(bitmask, width)
    if vocab_size is not None:
        allowed[:, vocab_size:] = False
    expected[~allowed] = float("-inf")
    result = apply_token_bitmask_(logits, bitmask, vocab_size=vocab_size)
    assert result is logits
    assert torch.equal(logits, expected)


def test_apply_works_on_half_precision() -> None:
    logits = torch.zeros(1, 40, dtype=torch.bfloat16)
    allowed = torch.zeros(1, 40, dtype=torch.bool)
    allowed[0, 3] = True
    apply_token_bitmask_(logits, pack_bitmask(allowed))
    assert torch.isneginf(logits).sum() == 39 and logits[0, 3] == 0


def test_apply_rejects_bad_inputs() -> None:
    logits = torch.zeros(2, 40)
    with pytest.raises(ValueError, match="int32"):
        apply_token_bitmask_(logits, torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="rows"):
        apply_token_bitmask_(logits, allocate_token_bitmask(3, 40))
    with pytest.raises(ValueError, match="2-D"):
        apply_token_bitmask_(torch.zeros(40), allocate_token_bitmask(1, 40))
    with pytest.raises(ValueError, match="2-D"):
        pack_bitmask(torch.zeros(2, 2, 40, dtype=torch.bool))
    one_row = torch.zeros(40, dtype=torch.bool)
    one_row[[0, 33, 39]] = True
    assert torch.equal(pack_bitmask(one_row), pack_bitmask(one_row[None])[0])  # a 1-D row packs to [W]
