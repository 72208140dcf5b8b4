"""logits → probabilities: THE one transform T used for draft and target alike.

``probs_from_logits`` applies, in this order: mask (``-inf`` where the bitmask disallows and at
ids ``>= vocab_size``) → temperature → top-k → top-p → min-p → softmax, in float32, with
per-row parameters (Python scalars or tensors ``[N]``).

Contract and invariants:
- The result is float32 ``[N, V]``; every disallowed id has probability exactly 0.
- Temperature 0 (per row) gives a one-hot at the masked argmax; ties go to the lowest id, so the
  result is deterministic. Negative temperatures are an error.
- ``top_k <= 0`` (or ``>= V``) is off; ties at the k-th largest logit are all kept (the HF/vLLM
  convention). ``top_p`` in ``(0, 1]``, ``1`` is off: keeps the smallest prefix of the sorted
  distribution whose mass reaches ``top_p`` (at least the most likely token). ``min_p`` in
  ``[0, 1]``, ``0`` is off: drops tokens below ``min_p * max_prob``. Filters never remove the
  most likely allowed token, so only the mask can empty a row.
- A row whose mask allows no token raises ``MaskDeadEndError`` (never a silent unconstrained
  token); NaN/+inf logits at allowed ids raise ``ValueError``. Both checks share one host sync.
- The caller's ``logits`` are never modified.

This module does not know where logits, masks or parameters come from (models, grammars,
requests), and does no sampling.
"""

from __future__ import annotations

import torch

from sampler.bitmask import apply_token_bitmask_

RowParam = float | int | torch.Tensor


class MaskDeadEndError(ValueError):
    """A mask row allows no token at all (a grammar dead end). ``.rows`` lists the dead rows."""

    def __init__(self, rows: list[int]) -> None:
        self.rows = list(rows)
        super().__init__(
            f"token mask allows no token in row(s) {self.rows}: grammar dead end "
            "(refusing to sample an unconstrained token)"
        )


def _row_tensor(
    name: str, value: RowParam, rows: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """A parameter as a tensor ``[rows]`` of ``dtype`` (scalars broadcast)."""
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:
            return value.to(dtype=dtype, device=device).expand(rows)
        if value.shape != (rows,):
            raise ValueError(
                f"{name} must be a scalar or a tensor [{rows}], got {tuple(value.shape)}"
            )
        return value.to(dtype=dtype, device=device)
    return torch.full((rows,), value, dtype=dtype, device=device)


def _scalar_or_none(value: RowParam) -> float | None:
    """The Python value of a scalar parameter, or None for a per-row tensor."""
    if isinstance(value, torch.Tensor):
        return None if value.dim() else float(value.item())
    return float(value)


def _validate(
    temperature: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor
) -> list[tuple[str, torch.Tensor]]:
    """Lazy per-parameter checks: (message, bool scalar tensor that is True when violated)."""
    return [
        (
            "temperature must be >= 0 and finite",
            (~(torch.isfinite(temperature) & (temperature >= 0))).any(),
        ),
        ("top_p must be in (0, 1]", (~((top_p > 0) & (top_p <= 1))).any()),
        ("min_p must be in [0, 1]", (~((min_p >= 0) & (min_p <= 1))).any()),
    ]


TOP_CANDIDATES = 1024
"""How many of each row's largest logits the top-k / top-p filter examines before it falls
back to sorting the whole row."""


def _effective_top_k(top_k: torch.Tensor, vocab: int) -> torch.Tensor:  # [N]
    """Top-k per row with "off" (``<= 0`` or ``> V``) spelled as ``V``."""
    return torch.where((top_k <= 0) | (top_k > vocab), vocab, top_k)


def _kth_largest(sorted_logits: torch.Tensor, k: torch.Tensor) -> torch.Tensor:  # [N, 1]
    """The k-th largest logit of each row of ``sorted_logits`` ``[N, C]`` (k clamped to C)."""
    return sorted_logits.gather(1, (k.clamp(max=sorted_logits.shape[1]) - 1).unsqueeze(1))


def _log_norm_after_top_k(
    logits: torch.Tensor,  # [N, V]
    cand_logits: torch.Tensor,  # [N, C] the C largest logits of each row, descending
    top_k: torch.Tensor | None,  # [N]
) -> torch.Tensor:  # [N, 1]
    """log Σ exp over what top-k keeps of each row (the whole row where top-k is off or
    reaches past the candidates)."""
    full = torch.logsumexp(logits, dim=-1, keepdim=True)  # [N, 1]
    if top_k is None:
        return full
    k = _effective_top_k(top_k, logits.shape[1])
    kth = _kth_largest(cand_logits, k)
    kept = torch.logsumexp(cand_logits.masked_fill(cand_logits < kth, float("-inf")), -1, True)
    return torch.where((k <= cand_logits.shape[1]).unsqueeze(1), kept, full)


def _filter_sorted(
    logits: torch.Tensor,  # [N, V]
    sorted_logits: torch.Tensor,  # [N, C] the C largest logits of each row, descending
    order: torch.Tensor,  # [N, C] their ids
    top_k: torch.Tensor | None,  # [N]
    top_p: torch.Tensor | None,  # [N]
) -> torch.Tensor:  # [N, V]
    """Top-k then top-p decided on each row's C largest logits. Ids outside them come out
    dropped, so the caller guarantees that all that is kept lies inside (C = V: a full sort)."""
    vocab = logits.shape[1]
    kept = sorted_logits
    if top_k is not None:
        kth = _kth_largest(sorted_logits, _effective_top_k(top_k, vocab))
        kept = kept.masked_fill(kept < kth, float("-inf"))
    if top_p is not None:
        if kept.shape[1] == vocab:
            log_norm = torch.logsumexp(kept, dim=-1, keepdim=True)  # [N, 1]
        else:
            log_norm = _log_norm_after_top_k(logits, sorted_logits, top_k)
        sorted_probs = (kept - log_norm).exp()  # [N, C]
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # exclusive prefix mass
        drop = (mass_before >= top_p.unsqueeze(1)) & (top_p < 1).unsqueeze(1)
        kept = kept.masked_fill(drop, float("-inf"))
    base = (
        torch.empty_like(logits)
        if kept.shape[1] == vocab
        else torch.full_like(logits, float("-inf"))
    )
    return base.scatter_(1, order, kept)


def _apply_top_k_top_p_(
    logits: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None
) -> torch.Tensor:
    """Top-k then top-p on ``logits`` ``[N, V]`` (already tempered); returns filtered logits.

    Decides on the ``TOP_CANDIDATES`` largest logits of each row (``torch.topk``: a full sort
    of 151,936 ids costs ~20 ms a row on CPU) and sorts whole rows only when the kept set may
    reach past them (top-k larger than the candidates, ties straddling the last candidate, or
    a nucleus wider than the candidates): the result is the full sort's either way.
    """
    vocab = logits.shape[1]
    width = min(vocab, TOP_CANDIDATES)
    if width < vocab:
        cand_logits, cand_ids = torch.topk(logits, width, dim=-1)  # [N, C], descending
        needs_full = torch.zeros(logits.shape[0], dtype=torch.bool, device=logits.device)
        if top_k is not None:
            k = _effective_top_k(top_k, vocab)
            kth = _kth_largest(cand_logits, k).squeeze(1)
            ties_past = (cand_logits[:, -1] == kth) & torch.isfinite(kth)
            needs_full |= (k > width) | ((k <= width) & ties_past)
        if top_p is not None:
            log_norm = _log_norm_after_top_k(logits, cand_logits, top_k)  # [N, 1]
            cand_mass = (cand_logits - log_norm).exp().sum(dim=-1)  # [N]
            needs_full |= (top_p < 1) & (cand_mass < top_p)
        if not bool(needs_full.any()):
            return _filter_sorted(logits, cand_logits, cand_ids, top_k, top_p)
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True, stable=True)  # [N, V]
    return _filter_sorted(logits, sorted_logits, order, top_k, top_p)


def probs_from_logits(
    logits: torch.Tensor,  # [N, V]
    *,
    bitmask: torch.Tensor | None = None,  # int32 [N, W]
    vocab_size: int | None = None,
    temperature: RowParam = 1.0,  # float or [N]
    top_k: RowParam = 0,  # int or [N]
    top_p: RowParam = 1.0,  # float or [N]
    min_p: RowParam = 0.0,  # float or [N]
) -> torch.Tensor:  # float32 [N, V]
    """Masked, tempered, filtered probabilities; see the module docstring for the contract."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D [N, V], got shape {tuple(logits.shape)}")
    if not logits.is_floating_point():
        raise ValueError(f"logits must be floating point, got {logits.dtype}")
    rows, width = logits.shape
    device = logits.device
    if rows == 0:
        return torch.empty(0, width, dtype=torch.float32, device=device)
    x = logits.to(torch.float32, copy=True)  # [N, V]; never touch the caller's tensor
    if bitmask is not None:
        apply_token_bitmask_(x, bitmask, vocab_size=vocab_size)
    elif vocab_size is not None:
        if vocab_size < 0:
            raise ValueError(f"vocab_size must be >= 0, got {vocab_size}")
        x[:, vocab_size:] = float("-inf")

    temp = _row_tensor("temperature", temperature, rows, torch.float32, device)
    k = _row_tensor("top_k", top_k, rows, torch.int64, device)
    tp = _row_tensor("top_p", top_p, rows, torch.float32, device)
    mp = _row_tensor("min_p", min_p, rows, torch.float32, device)

    dead = torch.isneginf(x).all(dim=-1)  # [N]
    bad_value = (torch.isnan(x) | torch.isposinf(x)).any(dim=-1)  # [N]
    checks = _validate(temp, tp, mp)
    flags = torch.stack([dead.any(), bad_value.any(), *(c for _, c in checks)]).tolist()  # one sync
    if flags[0]:
        raise MaskDeadEndError(torch.nonzero(dead).flatten().tolist())
    if flags[1]:
        raise ValueError(
            f"logits contain NaN or +inf at allowed ids in row(s) "
            f"{torch.nonzero(bad_value).flatten().tolist()}"
        )
    for (message, _), violated in zip(checks, flags[2:], strict=True):
        if violated:
            raise ValueError(message)

    temp_scalar = _scalar_or_none(temperature)
    greedy_hot = None
    if temp_scalar is None or temp_scalar == 0.0:
        # argmax returns the first maximal index: ties → lowest id, deterministic.
        greedy_hot = torch.zeros_like(x).scatter_(1, x.argmax(dim=-1, keepdim=True), 1.0)
        if temp_scalar == 0.0:
            return greedy_hot
    greedy = temp == 0  # [N]
    x = x / torch.where(greedy, 1.0, temp).unsqueeze(1)

    k_scalar, p_scalar, m_scalar = (
        _scalar_or_none(top_k),
        _scalar_or_none(top_p),
        _scalar_or_none(min_p),
    )
    use_k = k_scalar is None or 0 < k_scalar < width
    use_p = p_scalar is None or p_scalar < 1.0
    if use_k or use_p:
        x = _apply_top_k_top_p_(x, k if use_k else None, tp if use_p else None)
    if m_scalar is None or m_scalar > 0.0:
        probs = x.softmax(dim=-1)  # [N, V]
        threshold = mp.unsqueeze(1) * probs.amax(dim=-1, keepdim=True)  # [N, 1]
        x = x.masked_fill(probs < threshold, float("-inf"))
    probs = x.softmax(dim=-1)
    if greedy_hot is not None:
        probs = torch.where(greedy.unsqueeze(1), greedy_hot, probs)
    return probs
