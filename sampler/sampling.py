"""Categorical sampling from probability rows, by inverse CDF in float64.

``sample_from_probs(probs)`` draws one ``u ~ U[0, 1)`` (float64, 53-bit resolution) per row and
returns the first id whose float64 cumulative weight exceeds ``u * total``: an exact draw from
``probs / sum(probs)`` up to float64 rounding (the weights need not be normalized). A token with
weight 0 has an empty CDF interval and is never returned, so one-hot rows return their hot id
whatever ``u``. One random number per row (not one per vocabulary entry: drawing ``V``
exponentials costs more than the rest of a verification step on CPU). Randomness comes only
from the explicit ``torch.Generator`` (seeded ⇒ deterministic); it must live on the device of
``probs``.

This module does not know about masks, temperatures or speculative decoding.
"""

from __future__ import annotations

import torch


def sample_uniforms(
    rows: int, *, device: torch.device, generator: torch.Generator | None = None
) -> torch.Tensor:  # float64 [rows]
    """One float64 ``U[0, 1)`` per row, for ``inverse_cdf``."""
    return torch.rand((rows,), dtype=torch.float64, device=device, generator=generator)


def cumulative_weights(weights: torch.Tensor) -> torch.Tensor:  # [N, V] → float64 [N, V]
    """Float64 running sums of non-negative weights (adding an exact 0 keeps a plateau exact)."""
    return weights.cumsum(dim=-1, dtype=torch.float64)


def pick_from_cdf(
    cdf: torch.Tensor,  # float64 [N, V]
    uniforms: torch.Tensor,  # float64 [N] in [0, 1)
) -> torch.Tensor:  # Long [N]
    """First id whose cumulative weight exceeds ``u * total`` (``V - 1`` for a row without mass)."""
    threshold = uniforms.to(torch.float64).unsqueeze(1) * cdf[:, -1:]  # [N, 1], < total
    ids = torch.searchsorted(cdf, threshold, right=True).squeeze(1)  # first cdf > threshold
    return ids.clamp_(max=cdf.shape[-1] - 1)


def inverse_cdf(
    weights: torch.Tensor,  # [N, V], >= 0, unnormalized
    uniforms: torch.Tensor,  # float64 [N] in [0, 1)
) -> torch.Tensor:  # Long [N]
    """Sample by inverse CDF: ``pick_from_cdf(cumulative_weights(weights), uniforms)``."""
    return pick_from_cdf(cumulative_weights(weights), uniforms)


def sample_from_probs(
    probs: torch.Tensor,  # [N, V]
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:  # Long [N]
    """One token per row, distributed as ``probs[row] / probs[row].sum()``.

    Raises ``ValueError`` for a row with no positive mass (never returns an arbitrary id).
    """
    if probs.dim() != 2:
        raise ValueError(f"probs must be 2-D [N, V], got shape {tuple(probs.shape)}")
    if probs.shape[0] == 0:
        return torch.empty(0, dtype=torch.long, device=probs.device)
    if probs.shape[1] == 0:
        raise ValueError("probs has an empty vocabulary dimension")
    ids = inverse_cdf(
        probs, sample_uniforms(probs.shape[0], device=probs.device, generator=generator)
    )
    # the pick has positive weight whenever the row has any: an O(N) check for empty/NaN rows
    empty = ~(probs.gather(1, ids.unsqueeze(1)).squeeze(1) > 0)  # [N]
    if bool(empty.any()):
        raise ValueError(
            f"probs rows {torch.nonzero(empty).flatten().tolist()} have no positive mass"
        )
    return ids
