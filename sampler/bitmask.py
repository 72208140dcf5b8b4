"""Packed token bitmasks: the one mask format shared with `grammars` (by convention, never by import).

Format: an ``int32`` tensor ``[rows, ceil(V/32)]``; bit ``j`` of word ``i`` set ⇔ token
``32*i + j`` allowed (bit 31 is the sign bit, so a fully allowed word is ``-1``).

Invariants kept by every helper here:
- ids at or past ``vocab_size`` (the tokenizer's vocabulary; logits may be wider because of
  model padding) are never allowed;
- a bitmask with fewer words than the vocabulary needs allows nothing past its last word
  (missing bits read as 0: never silently unconstrained); extra words are ignored.

All helpers are vectorized (no Python loop over rows or vocab) and never sync with the host.
This module does not know about grammars, tokenizers or models.
"""

from __future__ import annotations

import torch

BITS_PER_WORD = 32


def num_words(vocab_size: int) -> int:
    """Number of int32 words needed for ``vocab_size`` tokens: ``ceil(vocab_size / 32)``."""
    if vocab_size < 0:
        raise ValueError(f"vocab_size must be >= 0, got {vocab_size}")
    return (vocab_size + BITS_PER_WORD - 1) // BITS_PER_WORD


def _check_bitmask(bitmask: torch.Tensor) -> None:
    if bitmask.dtype != torch.int32:
        raise ValueError(f"bitmask must be int32, got {bitmask.dtype}")
    if bitmask.dim() != 2:
        raise ValueError(f"bitmask must be 2-D [rows, words], got shape {tuple(bitmask.shape)}")


def allocate_token_bitmask(
    rows: int, vocab_size: int, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """A fresh all-allowed bitmask ``int32 [rows, ceil(vocab_size/32)]`` (every word ``-1``).

    Bits past ``vocab_size`` in the last word are set too; every consumer here masks ids at or
    past ``vocab_size`` independently, as grammar backends (xgrammar) also do.
    """
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    return torch.full((rows, num_words(vocab_size)), -1, dtype=torch.int32, device=device)


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``bitmask`` int32 ``[R, W]`` → allowed ``bool [R, vocab_size]``.

    Words past ``W`` (a too-narrow bitmask) read as all-disallowed; words past
    ``ceil(vocab_size/32)`` are ignored.
    """
    _check_bitmask(bitmask)
    rows = bitmask.shape[0]
    words = bitmask[:, : num_words(vocab_size)]  # [R, W']
    shifts = torch.arange(BITS_PER_WORD, dtype=torch.int32, device=bitmask.device)  # [32]
    bits = (words.unsqueeze(-1) >> shifts) & 1  # [R, W', 32]; arithmetic shift, &1 keeps bit j
    allowed = bits.reshape(rows, words.shape[1] * BITS_PER_WORD).bool()  # [R, 32*W']
    if allowed.shape[1] >= vocab_size:
        return allowed[:, :vocab_size]
    missing = torch.zeros(
        rows, vocab_size - allowed.shape[1], dtype=torch.bool, device=bitmask.device
    )
    return torch.cat([allowed, missing], dim=1)


def pack_bitmask(allowed: torch.Tensor) -> torch.Tensor:
    """Allowed ``bool [R, V]`` → int32 ``[R, ceil(V/32)]`` (padding bits past ``V`` are 0)."""
    if allowed.dim() != 2:
        raise ValueError(f"allowed must be 2-D [rows, vocab], got shape {tuple(allowed.shape)}")
    rows, vocab = allowed.shape
    width = num_words(vocab)
    padded = torch.zeros(rows, width * BITS_PER_WORD, dtype=torch.int64, device=allowed.device)
    padded[:, :vocab] = allowed.to(torch.int64)
    weights = torch.ones(BITS_PER_WORD, dtype=torch.int64, device=allowed.device) << torch.arange(
        BITS_PER_WORD, device=allowed.device
    )  # [32]: 1 << j
    words = (padded.view(rows, width, BITS_PER_WORD) * weights).sum(-1)  # [R, W] in [0, 2**32)
    words = torch.where(words >= 2**31, words - 2**32, words)  # two's complement, no overflow
    return words.to(torch.int32)


def apply_token_bitmask_(
    logits: torch.Tensor, bitmask: torch.Tensor, *, vocab_size: int | None = None
) -> torch.Tensor:
    """Set ``logits`` ``[R, Vl]`` to ``-inf`` in place wherever ``bitmask`` ``[R, W]`` disallows.

    ``vocab_size`` (default ``Vl``) is the tokenizer's vocabulary: ids ``>= vocab_size`` are
    always set to ``-inf``. Returns ``logits``.
    """
    _check_bitmask(bitmask)
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
