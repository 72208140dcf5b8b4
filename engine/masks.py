"""Reading single packed mask rows on the host: "is token t allowed" and "the one forced token".

A row is int32 [W] in the shared format (bit j of word i ⇔ token 32*i+j). These helpers do
not fill masks (grammars does) nor apply them to logits (sampler does).
"""

from __future__ import annotations

import torch


def token_allowed(row: torch.Tensor, token_id: int) -> bool:  # row: int32 [W]
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
    return index * 32 + word.bit_length() - 1
