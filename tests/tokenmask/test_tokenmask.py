"""The one bitmask format: single-row helpers agree with unpack, allow_only_ sets exactly the
given ids, at boundary vocab sizes (32·n ± 1)."""

from __future__ import annotations

import pytest
import torch

from tokenmask import (
    allocate_token_bitmask,
    allow_only_,
    forced_token,
    pack_bitmask,
    token_allowed,
    unpack_bitmask,
)


@pytest.mark.parametrize("vocab", [31, 32, 33, 63, 64, 65, 151_936])
def test_allow_only_and_row_readers(vocab: int) -> None:
    gen = torch.Generator().manual_seed(vocab)
    ids = sorted({int(t) for t in torch.randint(0, vocab, (5,), generator=gen)} | {vocab - 1})
    mask = allocate_token_bitmask(2, vocab)
    allow_only_(mask, 1, ids)
    allowed = unpack_bitmask(mask, vocab)
    assert allowed[0].all()
    assert torch.nonzero(allowed[1]).flatten().tolist() == ids
    assert all(token_allowed(mask[1], t) for t in ids)
    assert not any(token_allowed(mask[1], t) for t in range(vocab) if t not in ids and t < 70)
    assert forced_token(mask[1]) is None and forced_token(mask[0]) is None
    allow_only_(mask, 0, [vocab - 1])
    assert forced_token(mask[0]) == vocab - 1  # incl. bit 31 (the sign bit) at vocab 32, 64
    allow_only_(mask, 0, [])
    assert forced_token(mask[0]) is None and not unpack_bitmask(mask, vocab)[0].any()


@pytest.mark.parametrize("vocab", [1, 31, 32, 33, 95, 97])
def test_pack_unpack_roundtrip(vocab: int) -> None:
    allowed = torch.rand(3, vocab, generator=torch.Generator().manual_seed(7)) < 0.5
    assert torch.equal(unpack_bitmask(pack_bitmask(allowed), vocab), allowed)
