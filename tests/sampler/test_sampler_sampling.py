"""sample_from_probs: exact categorical law, seeded determinism, one-hot rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sampler_testlib import chi_square_pvalue

from sampler import sample_from_probs


def test_law_chi_square() -> None:
    probs = torch.tensor([0.5, 0.25, 0.125, 0.0, 0.125, 1e-3])
    probs = probs / probs.sum()
    draws = sample_from_probs(probs.expand(40_000, -1), generator=torch.Generator().manual_seed(0))
    assert chi_square_pvalue(np.bincount(draws.numpy(), minlength=6), probs.double().numpy()) > 1e-3


def test_unnormalized_weights_are_fine() -> None:
    weights = torch.tensor([[3.0, 1.0]]).expand(20_000, -1)
    draws = sample_from_probs(weights, generator=torch.Generator().manual_seed(1))
    assert chi_square_pvalue(np.bincount(draws.numpy(), minlength=2), np.array([0.75, 0.25])) > 1e-3


def test_one_hot_rows_return_hot_id_and_zero_never_sampled() -> None:
    probs = torch.zeros(1000, 97)
    hot = torch.arange(1000) % 97
    probs[torch.arange(1000), hot] = 1.0
    assert torch.equal(sample_from_probs(probs, generator=torch.Generator().manual_seed(2)), hot)


def test_seeded_determinism() -> None:
    probs = torch.rand(64, 300)
    a = sample_from_probs(probs, generator=torch.Generator().manual_seed(3))
    b = sample_from_probs(probs, generator=torch.Generator().manual_seed(3))
    c = sample_from_probs(probs, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.dtype == torch.long and a.shape == (64,)


def test_rows_without_mass_raise() -> None:
    probs = torch.rand(3, 10)
    probs[1] = 0
    with pytest.raises(ValueError, match=r"\[1\]"):
        sample_from_probs(probs)
    with pytest.raises(ValueError, match="2-D"):
        sample_from_probs(torch.rand(10))


def test_inverse_cdf_boundaries_skip_zero_weights() -> None:
    from sampler.sampling import inverse_cdf

    weights = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0]]).expand(4, -1)
    uniforms = torch.tensor([0.0, 0.5 - 1e-12, 0.5, 1.0 - 2**-53], dtype=torch.float64)
    assert inverse_cdf(weights, uniforms).tolist() == [1, 1, 3, 3]
