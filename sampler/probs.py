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


def _apply_top_k_top_p_(
    logits: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None
) -> torch.Tensor:
    """Top-k then top-p on ``logits`` ``[N, V]`` (already tempered); returns filtered logits."""
    vocab = logits.shape[1]
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True, stable=True)  # [N, V]
    if top_k is not None:
        k = torch.where((top_k <= 0) | (top_k > vocab), vocab, top_k)  # [N]
        kth = sorted_logits.gather(1, (k - 1).unsqueeze(1))  # [N, 1]
        sorted_logits.masked_fill_(sorted_logits < kth, float("-inf"))
    if top_p is not None:
        sorted_probs = sorted_logits.softmax(dim=-1)  # [N, V]
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # exclusive prefix mass
        drop = (mass_before >= top_p.unsqueeze(1)) & (top_p < 1).unsqueeze(1)
        sorted_logits.masked_fill_(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(1, order, sorted_logits)


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
