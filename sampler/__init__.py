"""specgate's sampler: pure torch math for grammar-masked speculative sampling.

No I/O, no logging; never imports `grammars`, `engine` or `gateway`. Shares only the packed
int32 bitmask format with `grammars`.

Files: `bitmask` (packed masks), `probs` (the one logits→probs transform T for draft and
target), `sampling` (inverse-CDF categorical sampling), `rejection` (vectorized
speculative rejection sampling; defines accepted / recovered / bonus), `reference` (slow
reference for tests and benchmarks), `acceptance` (statistics and the cost model).
"""

from sampler.acceptance import (
    AcceptanceStats,
    expected_speedup,
    expected_speedup_from_hazards,
    expected_tokens_from_hazards,
    expected_tokens_per_step,
)
from sampler.bitmask import (
    allocate_token_bitmask,
    apply_token_bitmask_,
    pack_bitmask,
    unpack_bitmask,
)
from sampler.probs import MaskDeadEndError, probs_from_logits
from sampler.reference import rejection_sample_reference
from sampler.rejection import rejection_sample
from sampler.sampling import sample_from_probs

__all__ = [
    "AcceptanceStats",
    "MaskDeadEndError",
    "allocate_token_bitmask",
    "apply_token_bitmask_",
    "expected_speedup",
    "expected_speedup_from_hazards",
    "expected_tokens_from_hazards",
    "expected_tokens_per_step",
    "pack_bitmask",
    "probs_from_logits",
    "rejection_sample",
    "rejection_sample_reference",
    "sample_from_probs",
    "unpack_bitmask",
]
