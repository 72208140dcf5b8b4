"""Slow, obviously-correct reference for ``rejection_sample`` (tests and benchmarks only).

Same signature, same terms (accepted / recovered / bonus, see ``sampler.rejection``) and the
same consumption of the generator (``draw_rejection_randomness``), so for one seed it returns
exactly what the vectorized ``rejection_sample`` returns. It walks rows and positions with plain
Python loops, following the textbook algorithm line by line (inverse CDF samples from
unnormalized weights, so no explicit normalization is needed). Never use it on a hot path.
"""

from __future__ import annotations

import torch

from sampler.rejection import check_rejection_inputs, draw_rejection_randomness
from sampler.sampling import inverse_cdf


def rejection_sample_reference(
    draft_token_ids: torch.Tensor,  # [B, K] long
    draft_probs: torch.Tensor,  # [B, K, V]
    target_probs: torch.Tensor,  # [B, K+1, V]
    *,
    num_draft_tokens: torch.Tensor | None = None,  # [B] long
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # ([B, K+1] long, -1 padded; [B] long)
    """Row-by-row, position-by-position rejection sampling; see ``sampler.rejection``."""
    num_drafts = check_rejection_inputs(
        draft_token_ids, draft_probs, target_probs, num_draft_tokens
    )
    batch, k = draft_token_ids.shape
    vocab = target_probs.shape[2]
    device = target_probs.device
    uniforms, sample_u = draw_rejection_randomness(
        batch, k, vocab, device=device, generator=generator
    )

    output = torch.full((batch, k + 1), -1, dtype=torch.long, device=device)
    num_accepted = torch.zeros(batch, dtype=torch.long, device=device)
    for b in range(batch):
        n = int(num_drafts[b])
        if not 0 <= n <= k:
            raise ValueError(f"num_draft_tokens must be in [0, K={k}], got {n} in row {b}")
        for i in range(n):
            x = int(draft_token_ids[b, i])
            if not 0 <= x < vocab:
                raise ValueError(f"draft token id {x} out of range [0, {vocab}) at ({b}, {i})")
            if not float(draft_probs[b, i, x]) > 0:
                raise ValueError(f"draft token {x} has draft probability 0 at ({b}, {i})")
        for i in range(n + 1):
            target = target_probs[b, i].float()  # [V]
            if not bool((target > 0).any()):
                raise ValueError(f"target_probs row ({b}, {i}) is all zero")
            if i == n:  # every draft accepted: bonus token from p_{n+1}
                output[b, i] = inverse_cdf(target[None], sample_u[b : b + 1])[0]
                num_accepted[b] = n
                break
            x = int(draft_token_ids[b, i])
            q_x = draft_probs[b, i, x].float()
            p_x = target[x]
            # accept with probability min(1, p/q): u < p/q, written without the division
            if bool(uniforms[b, i] * q_x < p_x):
                output[b, i] = x
                continue
            # first rejection: recovered token from norm((p - q)+), or p if that is all zero
            residual = (target - draft_probs[b, i].float()).clamp_min(0.0)
            if not bool((residual > 0).any()):
                residual = target
            output[b, i] = inverse_cdf(residual[None], sample_u[b : b + 1])[0]
            num_accepted[b] = i
            break
    return output, num_accepted
