"""Applying packed token bitmasks to logits (the format itself lives in `tokenmask`, shared
with `grammars`, which fills the masks).

Invariant: ids at or past ``vocab_size`` (the tokenizer's vocabulary; logits may be wider
because of model padding) are never allowed, and a too-narrow bitmask allows nothing past its
last word. Vectorized; never syncs with the host. Knows nothing of grammars or models.
"""

from __future__ import annotations

import torch

from tokenmask.bitmask import (
    allocate_token_bitmask,
    check_bitmask,
    num_words,
    pack_bitmask,
    unpack_bitmask,
)

__all__ = [
    "allocate_token_bitmask",
    "apply_token_bitmask_",
    "num_words",
    "pack_bitmask",
    "unpack_bitmask",
]


def apply_token_bitmask_(
    logits: torch.Tensor, bitmask: torch.Tensor, *, vocab_size: int | None = None
) -> torch.Tensor:
    """Set ``logits`` ``[R, Vl]`` to ``-inf`` in place wherever ``bitmask`` ``[R, W]`` disallows.

    ``vocab_size`` (default ``Vl``) is the tokenizer's vocabulary: ids ``>= vocab_size`` are
    always set to ``-inf``. Returns ``logits``.
    """
    check_bitmask(bitmask)
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D [rows, vocab], got shape {tuple(logits.shape)}")
    if not logits.is_floating_point():
        raise ValueError(f"logits must be floating point, got {logits.dtype}")
    if logits.shape[0] != bitmask.shape[0]:
        raise ValueError(
            f"logits has {logits.shape[0]} rows but bitmask has {bitmask.shape[0]} rows"
        )
    if logits.device != bitmask.device:
        raise ValueError(f"logits on {logits.device} but bitmask on {bitmask.device}")
    width = logits.shape[1]
    if vocab_size is not None and vocab_size < 0:
        raise ValueError(f"vocab_size must be >= 0, got {vocab_size}")
    allowed_width = width if vocab_size is None else min(vocab_size, width)
    allowed = unpack_bitmask(bitmask, allowed_width)  # [R, allowed_width]
    logits[:, :allowed_width].masked_fill_(~allowed, float("-inf"))
    if allowed_width < width:
        logits[:, allowed_width:] = float("-inf")
    return logits
