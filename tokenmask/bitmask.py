"""Building, packing and reading packed token bitmasks (format: see the package docstring).

Invariants kept by every helper here:
- a bitmask with fewer words than the vocabulary needs allows nothing past its last word
  (missing bits read as 0: never silently unconstrained); extra words are ignored;
- `pack_bitmask` leaves padding bits past ``V`` at 0; `allocate_token_bitmask` sets them
  (consumers mask ids at or past the tokenizer's vocabulary independently, as xgrammar does).

Whole-mask helpers are vectorized (no Python loop over rows or vocab) and never sync with the
host; `token_allowed` / `forced_token` read one row on the host by design (drafters ask them
once per draft position).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

BITS_PER_WORD = 32


def num_words(vocab_size: int) -> int:
    """Number of int32 words needed for ``vocab_size`` tokens: ``ceil(vocab_size / 32)``."""
    if vocab_size < 0:
        raise ValueError(f"vocab_size must be >= 0, got {vocab_size}")
    return (vocab_size + BITS_PER_WORD - 1) // BITS_PER_WORD


def check_bitmask(bitmask: torch.Tensor) -> None:
    if bitmask.dtype != torch.int32:
        raise ValueError(f"bitmask must be int32, got {bitmask.dtype}")
    if bitmask.dim() != 2:
        raise ValueError(f"bitmask must be 2-D [rows, words], got shape {tuple(bitmask.shape)}")


def allocate_token_bitmask(
    rows: int, vocab_size: int, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """A fresh all-allowed bitmask ``int32 [rows, ceil(vocab_size/32)]`` (every word ``-1``)."""
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    return torch.full((rows, num_words(vocab_size)), -1, dtype=torch.int32, device=device)


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``bitmask`` int32 ``[R, W]`` → allowed ``bool [R, vocab_size]``.

    Words past ``W`` (a too-narrow bitmask) read as all-disallowed; words past
    ``ceil(vocab_size/32)`` are ignored.
    """
    check_bitmask(bitmask)
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
    """Allowed ``bool [R, V]`` → int32 ``[R, ceil(V/32)]``; a 1-D ``[V]`` gives ``[ceil(V/32)]``."""
    if allowed.dim() == 1:
        return pack_bitmask(allowed[None])[0]
    if allowed.dim() != 2:
        raise ValueError(f"allowed must be 1-D or 2-D [rows, vocab], got shape {tuple(allowed.shape)}")
    rows, vocab = allowed.shape
    width = num_words(vocab)
    padded = torch.zeros(rows, width * BITS_PER_WORD, dtype=torch.int64, device=allowed.device)
    padded[:, :vocab] = allowed.to(torch.int64)
    shifts = torch.arange(BITS_PER_WORD, dtype=torch.int64, device=allowed.device)  # [32]
    words = (padded.view(rows, width, BITS_PER_WORD) << shifts).sum(-1)  # [R, W] in [0, 2**32)
    words = torch.where(words >= 2**31, words - 2**32, words)  # two's complement, no overflow
    return words.to(torch.int32)


def allow_only_(bitmask: torch.Tensor, row: int, token_ids: Iterable[int]) -> torch.Tensor:
    """Set ``bitmask[row]`` (int32 ``[R, W]``) in place to allow exactly ``token_ids``."""
    check_bitmask(bitmask)
    allowed = torch.zeros(bitmask.shape[1] * BITS_PER_WORD, dtype=torch.bool)
    ids = [int(t) for t in token_ids]
    if ids:
        allowed[torch.tensor(ids, dtype=torch.long)] = True
    bitmask[row] = pack_bitmask(allowed).to(bitmask.device)
    return bitmask


def token_allowed(row: torch.Tensor, token_id: int) -> bool:  # row: int32 [W]
    """Whether one row allows ``token_id`` (one host read)."""
    word = int(row[token_id >> 5])
    return bool((word >> (token_id & 31)) & 1)


def forced_token(row: torch.Tensor) -> int | None:  # row: int32 [W]
    """The only allowed token if exactly one bit of the row is set, else None (one host sync)."""
    nonzero = torch.nonzero(row).flatten()  # [n]
    if nonzero.numel() != 1:
        return None
    index = int(nonzero[0])
    word = int(row[index]) & 0xFFFFFFFF
    if word & (word - 1):
        return None
    return index * BITS_PER_WORD + word.bit_length() - 1
