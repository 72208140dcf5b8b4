"""probs_from_logits: mask → temperature → top-k → top-p → min-p → softmax, per row."""

from __future__ import annotations

import pytest
import torch

from sampler import MaskDeadEndError, pack_bitmask, probs_from_logits


def _brute_force(
    logits: torch.Tensor, *, temperature: float, top_k: int, top_p: float, min_p: float
):
    """One row at a time, in float64, with obvious loops over the sorted tokens."""
    out = []
    for row in logits.double():
        if temperature == 0:
            hot = torch.zeros_like(row)
            hot[int(torch.argmax(row))] = 1.0
            out.append(hot)
            continue
        x = row / temperature
        keep = torch.isfinite(x)
        order = sorted(range(len(x)), key=lambda t: (-float(x[t]), t))
        if 0 < top_k < len(x):
            kth = float(x[order[top_k - 1]])
            keep &= x >= kth
        if top_p < 1:
            probs = torch.where(keep, x, -torch.inf).softmax(-1)
            mass = 0.0
            for t in order:
                if mass >= top_p:
                    keep[t] = False
                mass += float(probs[t])
        if min_p > 0:
            probs = torch.where(keep, x, -torch.inf).softmax(-1)
            keep &= probs >= min_p * probs.max()
        out.append(torch.where(keep, x, -torch.inf).softmax(-1))
    return torch.stack(out)


CASES = [
    dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    dict(temperature=0.7, top_k=5, top_p=1.0, min_p=0.0),
    dict(temperature=1.3, top_k=0, top_p=0.8, min_p=0.0),
    dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.2),
    dict(temperature=0.5, top_k=7, top_p=0.6, min_p=0.05),
    dict(temperature=0.0, top_k=3, top_p=0.5, min_p=0.1),
]


@pytest.mark.parametrize("params", CASES)
def test_matches_brute_force_with_mask(params: dict) -> None:
    gen = torch.Generator().manual_seed(0)
    logits = 2 * torch.randn(6, 45, generator=gen)
    allowed = torch.rand(6, 45, generator=gen) < 0.5
    allowed[:, 0] = True
    probs = probs_from_logits(logits, bitmask=pack_bitmask(allowed), **params)
    masked = logits.masked_fill(~allowed, float("-inf"))
    assert probs.dtype == torch.float32 and probs.shape == (6, 45)
    torch.testing.assert_close(probs.double(), _brute_force(masked, **params), atol=1e-6, rtol=1e-5)
    assert (probs[~allowed] == 0).all()


def test_per_row_tensor_params_equal_scalar_calls() -> None:
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(len(CASES), 50, generator=gen)
    tensors = {
        name: torch.tensor([case[name] for case in CASES])
        for name in ("temperature", "top_k", "top_p", "min_p")
    }
    batched = probs_from_logits(logits, **tensors)
    for row, case in enumerate(CASES):
        torch.testing.assert_close(
            batched[row : row + 1], probs_from_logits(logits[row : row + 1], **case)
        )


def test_temperature_zero_is_one_hot_at_masked_argmax_lowest_id_on_ties() -> None:
    logits = torch.tensor([[1.0, 5.0, 5.0, 9.0, 5.0]])
    allowed = torch.tensor([[True, True, True, False, True]])
    probs = probs_from_logits(logits, bitmask=pack_bitmask(allowed), temperature=0.0)
    assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0, 0.0]]
    mixed = probs_from_logits(logits.repeat(2, 1), temperature=torch.tensor([0.0, 1.0]))
    assert mixed[0].tolist() == [0.0, 0.0, 0.0, 1.0, 0.0]
    torch.testing.assert_close(mixed[1], logits[0].softmax(-1))


@pytest.mark.parametrize("vocab_size", [31, 33, 63, 65, 97])
def test_ids_past_vocab_size_never_allowed(vocab_size: int) -> None:
    logits = torch.zeros(2, 128)
    logits[:, -1] = 100.0  # padding logit that would otherwise dominate
    bitmask = torch.full((2, 4), -1, dtype=torch.int32)
    for kwargs in (dict(bitmask=bitmask), dict()):
        probs = probs_from_logits(logits, vocab_size=vocab_size, **kwargs)
        assert (probs[:, vocab_size:] == 0).all()
        torch.testing.assert_close(probs.sum(-1), torch.ones(2))
        greedy = probs_from_logits(logits, vocab_size=vocab_size, temperature=0.0, **kwargs)
        assert greedy.argmax(-1).tolist() == [0, 0]


def test_dead_end_raises_with_rows_and_is_a_value_error() -> None:
    allowed = torch.ones(4, 40, dtype=torch.bool)
    allowed[1] = False
    allowed[3] = False
    with pytest.raises(MaskDeadEndError) as info:
        probs_from_logits(torch.randn(4, 40), bitmask=pack_bitmask(allowed))
    assert info.value.rows == [1, 3]
    assert isinstance(info.value, ValueError)
    # a row allowing only ids past vocab_size is a dead end too
    with pytest.raises(MaskDeadEndError):
        probs_from_logits(
            torch.randn(1, 40), bitmask=pack_bitmask(torch.arange(40)[None] >= 35), vocab_size=35
        )


def test_single_allowed_token_is_one_hot_under_any_params() -> None:
    allowed = torch.zeros(3, 40, dtype=torch.bool)
    allowed[:, 17] = True
    probs = probs_from_logits(
        torch.randn(3, 40),
        bitmask=pack_bitmask(allowed),
        temperature=torch.tensor([0.0, 0.3, 2.0]),
        top_k=1,
        top_p=0.1,
        min_p=0.9,
    )
    assert (probs[:, 17] == 1).all() and probs.sum() == 3


def test_half_precision_input_float32_output_and_input_untouched() -> None:
    logits = torch.randn(2, 40).to(torch.bfloat16)
    before = logits.clone()
    probs = probs_from_logits(logits, bitmask=pack_bitmask(torch.rand(2, 40) < 0.9), top_p=0.9)
    assert probs.dtype == torch.float32
    assert torch.equal(logits, before)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(temperature=-0.1), "temperature"),
        (dict(temperature=torch.tensor([1.0, float("nan")])), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=torch.tensor([0.5, 1.5])), "top_p"),
        (dict(min_p=1.5), "min_p"),
        (dict(temperature=torch.ones(3)), "temperature"),
    ],
)
def test_bad_params_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        probs_from_logits(torch.randn(2, 40), **kwargs)


def test_nan_at_allowed_id_raises_but_nan_at_masked_id_is_fine() -> None:
    logits = torch.randn(1, 40)
    logits[0, 5] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        probs_from_logits(logits)
    allowed = torch.ones(1, 40, dtype=torch.bool)
    allowed[0, 5] = False
    assert probs_from_logits(logits, bitmask=pack_bitmask(allowed))[0, 5] == 0


@pytest.mark.parametrize("scale", [0.5, 4.0])  # flat rows (nucleus past the candidates), peaked
def test_candidate_top_k_top_p_equals_full_sort(monkeypatch: pytest.MonkeyPatch, scale: float) -> None:
    """The topk-candidate fast path gives the full sort's result, falling back when it must."""
    import sampler.probs as probs_module

    gen = torch.Generator().manual_seed(7)
    rows, vocab = 12, 3001
    logits = torch.randn(rows, vocab, generator=gen) * scale
    logits[3, :40] = 9.0  # ties straddling the candidate boundary
    logits[5, 100:] = float("-inf")  # fewer allowed ids than candidates
    top_k = torch.tensor([0, 5, 60, 64, 65, 2000, 0, 1, 50, 0, 64, 3000])
    top_p = torch.tensor([0.9, 1.0, 0.5, 0.95, 0.99, 0.7, 0.3, 0.8, 1.0, 0.999, 0.6, 0.9])
    widths: list[int] = []
    real_filter = probs_module._filter_sorted

    def spy(logits, sorted_logits, *args):  # type: ignore[no-untyped-def]
        widths.append(sorted_logits.shape[1])
        return real_filter(logits, sorted_logits, *args)

    monkeypatch.setattr(probs_module, "_filter_sorted", spy)
    for row in range(rows):
        kwargs = dict(temperature=0.8, top_k=int(top_k[row]), top_p=float(top_p[row]))
        monkeypatch.setattr(probs_module, "TOP_CANDIDATES", vocab)
        full = probs_from_logits(logits[row : row + 1], **kwargs)
        monkeypatch.setattr(probs_module, "TOP_CANDIDATES", 64)
        fast = probs_from_logits(logits[row : row + 1], **kwargs)
        torch.testing.assert_close(fast, full, rtol=1e-5, atol=1e-7)
        assert torch.equal(fast > 0, full > 0), row
    fast_widths = widths[1::2]
    assert 64 in fast_widths  # the candidate path ran ...
    if scale > 1:
        assert vocab in fast_widths  # ... and so did the fallback (k past the candidates, ties)
