"""The packed token bitmask: the ONE mask format that `grammars` fills, `sampler` applies and
`engine` reads. Pure torch; it knows nothing of grammars, tokenizers, models or sampling.

Format: an ``int32`` tensor ``[rows, ceil(V/32)]``; bit ``j`` of word ``i`` set ⇔ token
``32*i + j`` allowed (bit 31 is the sign bit, so a fully allowed word is ``-1``). xgrammar,
llguidance, outlines-core and vLLM share it.
"""

from tokenmask.bitmask import (
    BITS_PER_WORD,
    allocate_token_bitmask,
    allow_only_,
    forced_token,
    num_words,
    pack_bitmask,
    token_allowed,
    unpack_bitmask,
)

__all__ = [
    "BITS_PER_WORD",
    "allocate_token_bitmask",
    "allow_only_",
    "forced_token",
    "num_words",
    "pack_bitmask",
    "token_allowed",
    "unpack_bitmask",
]
