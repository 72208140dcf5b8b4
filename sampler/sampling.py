"""Categorical sampling from probability rows, by the exponential race.

``sample_from_probs(probs)`` returns ``argmax_j probs[j] / E_j`` with ``E_j ~ Exp(1)`` i.i.d.,
which is an exact draw from ``probs / sum(probs)`` (the weights need not be normalized). A
token with probability 0 is never returned, so one-hot rows return their hot id whatever the
noise. Randomness comes only from the explicit ``torch.Generator`` (seeded ⇒ deterministic);
the generator must live on the device of ``probs``.

This module does not know about masks, temperatures or speculative decoding.
"""

from __future__ import annotations

import torch

# Exp(1) draws are clamped away from 0 so that a zero weight stays 0 (never 0/0).
_TINY = torch.finfo(torch.float32).tiny


def exponential_noise(
    shape: tuple[int, ...], *, device: torch.device, generator: torch.Generator | None = None
) -> torch.Tensor:
    """i.i.d. ``Exp(1)`` float32 noise of ``shape``, strictly positive."""
    noise = torch.empty(shape, dtype=torch.float32, device=device)
    return noise.exponential_(generator=generator).clamp_min_(_TINY)


def race(weights: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """``argmax(weights / noise)`` over the last dim: ``weights`` ``[N, V]`` ≥ 0 → Long ``[N]``."""
    return (weights.to(torch.float32) / noise).argmax(dim=-1)


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
    empty = ~(probs > 0).any(dim=-1)  # [N]; NaN rows count as empty too
    if bool(empty.any()):
        raise ValueError(
            f"probs rows {torch.nonzero(empty).flatten().tolist()} have no positive mass"
        )
    noise = exponential_noise(tuple(probs.shape), device=probs.device, generator=generator)
    return race(probs, noise)
