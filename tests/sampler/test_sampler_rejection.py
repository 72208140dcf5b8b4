"""rejection_sample: output structure, masked-draft properties, greedy, ragged batches, vocab
widths, bad input, and agreement with the slow reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sampler import (
    pack_bitmask,
    probs_from_logits,
    rejection_sample,
    rejection_sample_reference,
    sample_from_probs,
)


def _masked_problem(
    batch: int,
    k: int,
    vocab: int,
    *,
    seed: int,
    width: int | None = None,
    temperature: float | torch.Tensor = 1.0,
    allow: float = 0.3,
):
    """Random per-(row, position) masks; masked target/draft probs; drafts from masked q."""
    width = width or vocab
    gen = torch.Generator().manual_seed(seed)
    allowed = torch.rand(batch * (k + 1), vocab, generator=gen) < allow
    allowed[
        torch.arange(batch * (k + 1)), torch.randint(vocab, (batch * (k + 1),), generator=gen)
    ] = True
    bitmask = pack_bitmask(allowed)
    target_logits = 2 * torch.randn(batch * (k + 1), width, generator=gen)
    draft_logits = target_logits + torch.randn(batch * (k + 1), width, generator=gen)
    if isinstance(temperature, torch.Tensor):
        temperature = temperature.repeat_interleave(k + 1)
    params = dict(bitmask=bitmask, vocab_size=vocab, temperature=temperature)
    target = probs_from_logits(target_logits, **params).view(batch, k + 1, width)
    draft = probs_from_logits(draft_logits, **params).view(batch, k + 1, width)[:, :k]
    draft_ids = (
        sample_from_probs(draft.reshape(batch * k, width), generator=gen).view(batch, k)
        if k
        else (torch.zeros(batch, 0, dtype=torch.long))
    )
    return draft_ids, draft.contiguous(), target, allowed.view(batch, k + 1, vocab)


def _check_structure(out, num_accepted, draft_ids, num_drafts) -> None:
    batch, k = draft_ids.shape
    assert out.shape == (batch, k + 1) and out.dtype == torch.long
    assert num_accepted.shape == (batch,) and num_accepted.dtype == torch.long
    for b in range(batch):
        a = int(num_accepted[b])
        assert 0 <= a <= int(num_drafts[b])
        assert out[b, :a].tolist() == draft_ids[b, :a].tolist()
        assert int(out[b, a]) >= 0
        assert (out[b, a + 1 :] == -1).all()


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 6),
    k=st.integers(0, 6),
    vocab=st.integers(1, 70),
    seed=st.integers(0, 10**6),
    ragged=st.booleans(),
)
def test_structure_and_padding_property(
    batch: int, k: int, vocab: int, seed: int, ragged: bool
) -> None:
    draft_ids, draft, target, allowed = _masked_problem(batch, k, vocab, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    num_drafts = (
        torch.randint(k + 1, (batch,), generator=gen) if ragged else torch.full((batch,), k)
    )
    padded_ids = torch.where(torch.arange(k) < num_drafts[:, None], draft_ids, -1)  # -1 past n
    out, num_accepted = rejection_sample(
        padded_ids, draft, target, num_draft_tokens=num_drafts, generator=gen
    )
    _check_structure(out, num_accepted, padded_ids, num_drafts)
    emitted = out[torch.arange(batch), num_accepted]
    assert allowed[torch.arange(batch), num_accepted, emitted].all()


@pytest.mark.parametrize("vocab", [31, 33, 63, 65, 95, 97])
def test_disallowed_token_never_emitted(vocab: int) -> None:
    batch, k = 400, 4
    draft_ids, draft, target, allowed = _masked_problem(
        batch, k, vocab, seed=vocab, width=vocab + 11
    )
    out, num_accepted = rejection_sample(
        draft_ids, draft, target, generator=torch.Generator().manual_seed(0)
    )
    for i in range(k + 1):
        emitted = num_accepted >= i
        tokens = out[emitted, i]
        assert (tokens < vocab).all()
        assert allowed[emitted, i, :][torch.arange(len(tokens)), tokens].all()


def test_single_allowed_token_is_always_accepted() -> None:
    batch, k, vocab = 500, 3, 40
    draft_ids, draft, target, _ = _masked_problem(
        batch, k, vocab, seed=5, allow=0.0
    )  # one token each
    out, num_accepted = rejection_sample(
        draft_ids, draft, target, generator=torch.Generator().manual_seed(0)
    )
    assert (num_accepted == k).all()
    assert torch.equal(out[:, :k], draft_ids)
    assert torch.equal(out[:, k], target[:, k].argmax(-1))


def test_temperature_zero_equals_target_argmax_token_for_token() -> None:
    batch, k, vocab = 64, 6, 50
    draft_ids, draft, target, _ = _masked_problem(
        batch, k, vocab, seed=6, temperature=0.0, allow=0.6
    )
    out, num_accepted = rejection_sample(
        draft_ids, draft, target, generator=torch.Generator().manual_seed(1)
    )
    greedy = target.argmax(-1)  # [B, K+1]
    matches = torch.cat([draft_ids == greedy[:, :k], torch.zeros(batch, 1, dtype=torch.bool)], 1)
    expected_accepted = matches.to(torch.int8).argmin(-1)  # first mismatch
    assert torch.equal(num_accepted, expected_accepted)
    for b in range(batch):
        a = int(num_accepted[b])
        assert out[b, : a + 1].tolist() == greedy[b, : a + 1].tolist()
    assert 0 < num_accepted.float().mean() < k  # both accepting and rejecting rows occur


def test_ragged_rows_and_zero_draft_rows_sample_bonus_from_right_position() -> None:
    batch, k, vocab = 6, 4, 40
    draft_ids, draft, target, _ = _masked_problem(batch, k, vocab, seed=7, temperature=0.0)
    draft = target[:, :k].clone()  # q == p one-hot: everything is accepted
    draft_ids = target[:, :k].argmax(-1)
    num_drafts = torch.tensor([0, 1, 2, 3, 4, 0])
    draft_ids = torch.where(torch.arange(k) < num_drafts[:, None], draft_ids, -1)
    out, num_accepted = rejection_sample(draft_ids, draft, target, num_draft_tokens=num_drafts)
    assert torch.equal(num_accepted, num_drafts)
    bonus = target[torch.arange(batch), num_drafts].argmax(-1)
    assert torch.equal(out[torch.arange(batch), num_drafts], bonus)
    _check_structure(out, num_accepted, draft_ids, num_drafts)


def test_k_zero_is_plain_sampling() -> None:
    target = torch.tensor([[[0.0, 1.0, 0.0]], [[0.0, 0.0, 1.0]]])
    out, num_accepted = rejection_sample(
        torch.zeros(2, 0, dtype=torch.long), torch.zeros(2, 0, 3), target
    )
    assert out.tolist() == [[1], [2]] and num_accepted.tolist() == [0, 0]


@pytest.mark.parametrize("impl", [rejection_sample, rejection_sample_reference])
def test_all_zero_residual_falls_back_to_target(impl) -> None:
    """q >= p everywhere (an unnormalized q) makes (p - q)+ all zero at a rejection: the
    recovered token then comes from p, never from an empty distribution."""
    rows = 4000
    target = torch.tensor([[[0.2, 0.0, 0.8], [0.0, 1.0, 0.0]]]).expand(rows, -1, -1)
    draft = torch.tensor([[[1.0, 1.0, 1.0]]]).expand(rows, -1, -1)
    out, num_accepted = impl(
        torch.zeros(rows, 1, dtype=torch.long),
        draft,
        target,
        generator=torch.Generator().manual_seed(0),
    )
    rejected = num_accepted == 0
    assert 0.75 < rejected.float().mean() < 0.85  # accept w.p. p(0)/q(0) = 0.2
    recovered = out[rejected, 0]
    assert set(recovered.unique().tolist()) == {0, 2}  # from p: token 1 (p = 0) never appears
    assert 0.15 < (recovered == 0).float().mean() < 0.25
    assert (out[~rejected, 1] == 1).all()


@pytest.mark.parametrize("seed", range(6))
def test_fast_path_equals_reference_for_shared_seed(seed: int) -> None:
    batch, k, vocab = 16, 5, 45
    temperature = torch.tensor([0.0, 0.5, 1.0, 2.0]).repeat(4)
    draft_ids, draft, target, _ = _masked_problem(
        batch, k, vocab, seed=seed, width=64, temperature=temperature
    )
    num_drafts = torch.randint(k + 1, (batch,), generator=torch.Generator().manual_seed(seed))
    draft_ids = torch.where(torch.arange(k) < num_drafts[:, None], draft_ids, -1)
    fast = rejection_sample(
        draft_ids,
        draft,
        target,
        num_draft_tokens=num_drafts,
        generator=torch.Generator().manual_seed(seed),
    )
    slow = rejection_sample_reference(
        draft_ids,
        draft,
        target,
        num_draft_tokens=num_drafts,
        generator=torch.Generator().manual_seed(seed),
    )
    assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])


def test_fast_path_and_reference_same_acceptance_law() -> None:
    """Independent seeds: the mean accepted length agrees within Monte-Carlo error."""
    draft_ids, draft, target, _ = _masked_problem(1, 3, 20, seed=9, allow=0.7)
    rows = 3000
    args = (draft_ids.expand(rows, -1), draft.expand(rows, -1, -1), target.expand(rows, -1, -1))
    _, fast = rejection_sample(*args, generator=torch.Generator().manual_seed(1))
    _, slow = rejection_sample_reference(*args, generator=torch.Generator().manual_seed(2))
    se = (fast.float().var() / rows * 2).sqrt()
    assert abs(fast.float().mean() - slow.float().mean()) < 5 * se


def test_seeded_determinism() -> None:
    draft_ids, draft, target, _ = _masked_problem(32, 4, 40, seed=11, allow=0.8)
    a = rejection_sample(draft_ids, draft, target, generator=torch.Generator().manual_seed(3))
    b = rejection_sample(draft_ids, draft, target, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("impl", [rejection_sample, rejection_sample_reference])
def test_bad_inputs_raise_value_error(impl) -> None:
    draft_ids, draft, target, _ = _masked_problem(3, 2, 40, seed=12)
    with pytest.raises(ValueError, match="draft token ids|out of range"):
        impl(draft_ids.masked_fill(torch.tensor([[False, True]] * 3), -1), draft, target)
    with pytest.raises(ValueError, match="draft token ids|out of range"):
        impl(draft_ids.masked_fill(torch.tensor([[True, False]] * 3), 40), draft, target)
    zero_q = draft.clone()
    zero_q[0, 0, draft_ids[0, 0]] = 0.0  # a draft its own (masked) q could not have produced
    with pytest.raises(ValueError, match="probability 0"):
        impl(draft_ids, zero_q, target)
    with pytest.raises(ValueError, match="num_draft_tokens"):
        impl(draft_ids, draft, target, num_draft_tokens=torch.tensor([0, 3, 1]))
    with pytest.raises(ValueError, match="target_probs"):
        impl(draft_ids, draft, target[:, :2])
    with pytest.raises(ValueError, match="draft_probs"):
        impl(draft_ids, draft[:, :, :30], target)
    with pytest.raises(ValueError, match="target_probs"):
        impl(draft_ids, draft, torch.zeros_like(target))
