"""Speculative rejection sampling over masked distributions (Leviathan et al. 2023; Chen et al. 2023).

Terms (as in vLLM's rejection sampler), for one batch row with drafts ``x_1..x_n``
(``n = num_draft_tokens[b] <= K``), draft probabilities ``q_i`` and target probabilities ``p_i``
(both produced by ``probs_from_logits`` with the SAME mask ``m_i`` and parameters):

- **accepted** token: draft ``x_i`` kept because ``u_i < p_i(x_i) / q_i(x_i)`` with
  ``u_i ~ U[0, 1)``, i.e. with probability ``min(1, p_i(x_i) / q_i(x_i))``; drafts are checked
  in order and checking stops at the first rejection;
- **recovered** token: emitted at the first rejected position ``i`` instead of ``x_i``, drawn
  from ``norm((p_i - q_i)+)`` (from ``p_i`` if that residual is all zero, which only float
  rounding can cause);
- **bonus** token: emitted after all ``n`` drafts are accepted, drawn from ``p_{n+1}``
  (``target_probs[b, n]``; with ``n = 0`` the row is plain sampling from ``target_probs[b, 0]``).

Output per row: the ``num_accepted`` accepted drafts, then exactly one recovered or bonus token,
then ``-1`` padding up to ``K + 1``. The emitted tokens have exactly the law of plain (masked)
sampling from the target, so every emitted token is allowed by its mask; ``-1`` never appears
within the first ``num_accepted + 1`` positions.

Randomness: per call, acceptance uniforms float32 ``[B, K]`` then one float64 sampling uniform
per row ``[B]`` are drawn from ``generator`` (see ``draw_rejection_randomness``). A row emits
exactly one recovered-or-bonus token, drawn by inverse CDF over its (unnormalized) distribution,
so one sampling uniform per row suffices and is independent of the choice of position. ``rejection_sample_reference``
consumes the generator identically, so both give identical outputs for the same seed.

Fully vectorized: no Python loop over batch, positions or vocabulary; about six passes over
``[B, V]`` (two gathers, residual, float64 cumsum); all input validation shares one host sync at
the end. Bad input (draft id ``-1``/out of range within the first
``num_draft_tokens`` positions, a draft with ``q = 0`` — impossible once ``q`` is masked —,
an all-zero target row, wrong shapes) raises ``ValueError``.

This module does not know about grammars, models or how drafts were produced (a model-free
drafter passes one-hot ``draft_probs``).
"""

from __future__ import annotations

import torch

from sampler.sampling import cumulative_weights, pick_from_cdf, sample_uniforms


def check_rejection_inputs(
    draft_token_ids: torch.Tensor,  # [B, K] long
    draft_probs: torch.Tensor,  # [B, K, V]
    target_probs: torch.Tensor,  # [B, K+1, V]
    num_draft_tokens: torch.Tensor | None,  # [B] long
) -> torch.Tensor:  # [B] long
    """Shape/dtype checks shared with the reference; returns ``num_draft_tokens`` (default ``K``)."""
    if draft_token_ids.dim() != 2:
        raise ValueError(
            f"draft_token_ids must be [B, K], got shape {tuple(draft_token_ids.shape)}"
        )
    if draft_token_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"draft_token_ids must be an integer tensor, got {draft_token_ids.dtype}")
    batch, k = draft_token_ids.shape
    if target_probs.dim() != 3 or target_probs.shape[:2] != (batch, k + 1):
        raise ValueError(
            f"target_probs must be [B, K+1, V] = [{batch}, {k + 1}, V], got {tuple(target_probs.shape)}"
        )
    vocab = target_probs.shape[2]
    if draft_probs.shape != (batch, k, vocab):
        raise ValueError(
            f"draft_probs must be [B, K, V] = [{batch}, {k}, {vocab}], got {tuple(draft_probs.shape)}"
        )
    if vocab == 0:
        raise ValueError("empty vocabulary dimension")
    if not (draft_probs.is_floating_point() and target_probs.is_floating_point()):
        raise ValueError("draft_probs and target_probs must be floating point")
    device = target_probs.device
    if draft_probs.device != device or draft_token_ids.device != device:
        raise ValueError("draft_token_ids, draft_probs and target_probs must share a device")
    if num_draft_tokens is None:
        return torch.full((batch,), k, dtype=torch.long, device=device)
    if num_draft_tokens.shape != (batch,) or num_draft_tokens.dtype not in (
        torch.int64,
        torch.int32,
    ):
        raise ValueError(
            f"num_draft_tokens must be an integer tensor [{batch}], got "
            f"{num_draft_tokens.dtype} {tuple(num_draft_tokens.shape)}"
        )
    return num_draft_tokens.to(device=device, dtype=torch.long)


def draw_rejection_randomness(
    batch: int,
    k: int,
    vocab: int,
    *,
    device: torch.device,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Acceptance uniforms float32 ``[B, K]`` and sampling uniforms float64 ``[B]``, in that order.

    ``vocab`` is unused (kept so the draw's signature names the whole problem).
    """
    uniforms = torch.rand((batch, k), dtype=torch.float32, device=device, generator=generator)
    return uniforms, sample_uniforms(batch, device=device, generator=generator)


def residual_weights_(
    target_row: torch.Tensor,  # [N, V] float32, overwritten
    draft_row: torch.Tensor,  # [N, V] float32
) -> torch.Tensor:  # [N, V], unnormalized
    """``(p - q)+`` computed in place in ``target_row`` (the recovered-token weights).

    Rows where it is all zero are resampled from ``p`` by the caller.
    """
    return target_row.sub_(draft_row).clamp_min_(0.0)


def rejection_sample(
    draft_token_ids: torch.Tensor,  # [B, K] long
    draft_probs: torch.Tensor,  # [B, K, V]
    target_probs: torch.Tensor,  # [B, K+1, V]
    *,
    num_draft_tokens: torch.Tensor | None = None,  # [B] long, each in [0, K]
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # ([B, K+1] long, -1 padded; [B] long)
    """Verify drafts against the target; returns ``(output_token_ids, num_accepted)``."""
    num_drafts = check_rejection_inputs(
        draft_token_ids, draft_probs, target_probs, num_draft_tokens
    )
    batch, k = draft_token_ids.shape
    vocab = target_probs.shape[2]
    device = target_probs.device
    uniforms, sample_u = draw_rejection_randomness(
        batch, k, vocab, device=device, generator=generator
    )

    ids = draft_token_ids.to(torch.long)  # [B, K]
    positions = torch.arange(k, device=device)  # [K]
    valid = positions < num_drafts.unsqueeze(1)  # [B, K]: real (non-padding) drafts
    bad_id = valid & ((ids < 0) | (ids >= vocab))  # [B, K]
    safe_ids = ids.clamp(0, vocab - 1).unsqueeze(-1)  # [B, K, 1]
    draft_p = draft_probs.gather(2, safe_ids).squeeze(-1).float()  # [B, K]: q_i(x_i)
    target_p = target_probs[:, :k].gather(2, safe_ids).squeeze(-1).float()  # [B, K]: p_i(x_i)
    zero_q = valid & ~bad_id & ~(draft_p > 0)  # [B, K]

    accepted = (uniforms * draft_p < target_p) & valid  # [B, K]
    stop = torch.cat([~accepted, torch.ones(batch, 1, dtype=torch.bool, device=device)], dim=1)
    num_accepted = stop.to(torch.int8).argmax(dim=1)  # [B]: first stop (argmax takes the first max)

    rows = torch.arange(batch, device=device)
    # weights [B, V]: (p - q)+ at a rejected position, p at the bonus position (q zeroed there)
    weights = target_probs[rows, num_accepted].float()  # a fresh copy: safe to edit in place
    if k > 0:
        not_bonus = (num_accepted < num_drafts).unsqueeze(1)  # [B, 1]
        draft_at = draft_probs[rows, num_accepted.clamp(max=k - 1)].float()  # [B, V]
        weights = residual_weights_(weights, draft_at.mul_(not_bonus))
    cdf = cumulative_weights(weights)  # [B, V] float64
    emitted = pick_from_cdf(cdf, sample_u)  # [B]
    no_mass = ~(cdf[:, -1] > 0)  # [B]: residual all zero (rounding) or a dead/NaN target row

    output = torch.where(positions < num_accepted.unsqueeze(1), ids, -1)  # [B, K]
    output = torch.cat([output, torch.full((batch, 1), -1, dtype=torch.long, device=device)], dim=1)
    output[rows, num_accepted] = emitted

    flags = torch.stack(
        [
            ((num_drafts < 0) | (num_drafts > k)).any(),
            bad_id.any(),
            zero_q.any(),
            no_mass.any(),
        ]
    ).tolist()  # the one host sync
    if flags[0]:
        raise ValueError(f"num_draft_tokens must be in [0, K={k}], got {num_drafts.tolist()}")
    if flags[1]:
        where = torch.nonzero(bad_id).tolist()
        raise ValueError(
            f"draft token ids must be in [0, {vocab}) within num_draft_tokens; bad (row, position): {where}"
        )
    if flags[2]:
        where = torch.nonzero(zero_q).tolist()
        raise ValueError(
            "draft token has draft probability 0 (was the draft sampled from a different, e.g. "
            f"unmasked, distribution than draft_probs?); (row, position): {where}"
        )
    if flags[3]:  # rare: fall back to p for those rows, error if p has no mass either
        fallback = torch.nonzero(no_mass).flatten()  # [F]
        target_cdf = cumulative_weights(target_probs[fallback, num_accepted[fallback]].float())
        if not bool((target_cdf[:, -1] > 0).all()):
            dead = fallback[~(target_cdf[:, -1] > 0)].tolist()
            raise ValueError(
                f"target_probs row is all zero (or NaN) at the emitting position for batch rows {dead}"
            )
        output[fallback, num_accepted[fallback]] = pick_from_cdf(target_cdf, sample_u[fallback])
    return output, num_accepted
