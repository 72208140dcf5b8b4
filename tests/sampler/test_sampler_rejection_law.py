"""The sampler invariant: one speculative step emits tokens with exactly the law of plain masked
target sampling — proved by exact enumeration, checked on the real implementation by seeded
chi-square tests, and shown to catch deliberately broken samplers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sampler_testlib import (
    chi_square_pvalue,
    complete,
    make_world,
    scheme_law,
    sequence_pvalue,
    simulate,
    target_law,
    total_variation,
)

import sampler.rejection
from sampler import pack_bitmask, probs_from_logits, rejection_sample, sample_from_probs

PASS_P = 1e-3  # seeded, so deterministic; a correct sampler sits far above this
FAIL_P = 1e-6

WORLD_PARAMS = [
    dict(),
    dict(temperature=0.7, top_p=0.9),
    dict(temperature=1.5, top_k=3, min_p=0.05),
]


# --- exact enumeration -------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("params", WORLD_PARAMS)
def test_exact_law_equals_plain_masked_target_sampling(k: int, params: dict) -> None:
    world = make_world(vocab=5, depth=k, seed=10 + k, **params)
    emitted = scheme_law(world, k)
    assert sum(emitted.values()) == pytest.approx(1.0, abs=1e-12)
    assert all(world.allowed[world.index[seq[:-1]], seq[-1]] for seq in emitted if emitted[seq] > 0)
    assert total_variation(complete(world, emitted, k + 1), target_law(world, k + 1)) < 1e-12
    # and the first emitted token alone is distributed as p_1
    first = np.zeros(world.vocab)
    for seq, prob in emitted.items():
        first[seq[0]] += prob
    np.testing.assert_allclose(first, world.p(()), atol=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_exact_law_unmasked_draft_is_still_exact(k: int) -> None:
    """Masking p alone keeps the law exact when q is unmasked *consistently* (drafted and
    scored with the same q); masking q is about acceptance, and about the broken variants."""
    world = make_world(vocab=5, depth=k, seed=20 + k)
    emitted = scheme_law(world, k, variant="unmasked")
    assert total_variation(complete(world, emitted, k + 1), target_law(world, k + 1)) < 1e-12


@pytest.mark.parametrize("variant", ["recover_from_p", "mismatched_q", "truncate"])
@pytest.mark.parametrize("k", [1, 3])
def test_exact_check_detects_broken_schemes(variant: str, k: int) -> None:
    world = make_world(vocab=5, depth=k, seed=k)
    emitted = scheme_law(world, k, variant=variant)
    assert total_variation(complete(world, emitted, k + 1), target_law(world, k + 1)) > 0.01


# --- Monte-Carlo on the implementation, context-dependent p/q ---------------------------

SAMPLES = 30_000


@pytest.mark.parametrize("k", [1, 2, 3])
def test_implementation_sequence_law_context_dependent(k: int) -> None:
    world = make_world(vocab=5, depth=k, seed=k, temperature=0.8, top_p=0.95)
    seqs, _ = simulate(world, k, SAMPLES, seed=100 + k)
    assert sequence_pvalue(world, seqs) > PASS_P


def test_implementation_unmasked_consistent_draft_is_exact_but_accepts_less() -> None:
    world = make_world(vocab=5, depth=1, seed=1)
    seqs, accepted_unmasked = simulate(
        world, 1, SAMPLES, seed=7, draft_from="unmasked", sampler_draft_probs="unmasked"
    )
    assert sequence_pvalue(world, seqs) > PASS_P
    _, accepted_masked = simulate(world, 1, SAMPLES, seed=7)
    assert accepted_masked.float().mean() > accepted_unmasked.float().mean() + 0.01


# Worlds where every broken variant is far (exact TV > 0.04) from the target law, so that
# SAMPLES rows give the chi-square check overwhelming power; `_broken_world` asserts it.
BROKEN_CASES = [(1, 1), (3, 2)]  # (k, world seed)


def _broken_world(k: int, seed: int, variant: str):
    world = make_world(vocab=5, depth=k, seed=seed)
    emitted = scheme_law(world, k, variant=variant)
    assert total_variation(complete(world, emitted, k + 1), target_law(world, k + 1)) > 0.04
    return world


@pytest.mark.parametrize(("k", "seed"), BROKEN_CASES)
def test_statistical_check_detects_unmasked_q_in_sampler(k: int, seed: int) -> None:
    """Engine bug: drafts drawn from masked q but the sampler is handed unmasked q."""
    world = _broken_world(k, seed, "mismatched_q")
    seqs, _ = simulate(world, k, SAMPLES, seed=3, sampler_draft_probs="unmasked")
    assert sequence_pvalue(world, seqs) < FAIL_P


@pytest.mark.parametrize(("k", "seed"), BROKEN_CASES)
def test_statistical_check_detects_vllm_style_truncation(k: int, seed: int) -> None:
    """Unmasked draft truncated at its first grammar-invalid token, then plain p (vLLM V1)."""
    world = _broken_world(k, seed, "truncate")
    seqs, _ = simulate(
        world,
        k,
        SAMPLES,
        seed=4,
        draft_from="unmasked",
        sampler_draft_probs="unmasked",
        truncate_invalid=True,
    )
    assert sequence_pvalue(world, seqs) < FAIL_P


@pytest.mark.parametrize(("k", "seed"), BROKEN_CASES)
def test_statistical_check_detects_recovery_from_p(
    k: int, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same implementation with the (p - q)+ correction removed must fail the check."""

    def recover_from_target(target_row: torch.Tensor, draft_row: torch.Tensor) -> torch.Tensor:
        return target_row

    world = _broken_world(k, seed, "recover_from_p")
    monkeypatch.setattr(sampler.rejection, "residual_weights_", recover_from_target)
    seqs, _ = simulate(world, k, SAMPLES, seed=5)
    assert sequence_pvalue(world, seqs) < FAIL_P


# --- Monte-Carlo: per-position laws over random masks / temperatures / top-p, K = 1..8 ---


def _position_problem(k: int, seed: int, *, vocab: int = 37, width: int = 40):
    """Per-position masked p_i, q_i ([K+1, width]) with random masks and sampling params."""
    gen = torch.Generator().manual_seed(seed)
    allowed = torch.rand(k + 1, vocab, generator=gen) < 0.4
    allowed[torch.arange(k + 1), torch.randint(vocab, (k + 1,), generator=gen)] = True
    allowed[k // 2] = False  # one position whose mask allows exactly one token
    allowed[k // 2, seed % vocab] = True
    target_logits = 2.0 * torch.randn(k + 1, width, generator=gen)
    draft_logits = target_logits + 1.5 * torch.randn(k + 1, width, generator=gen)
    temperature = torch.tensor([0.5, 1.0, 1.7])[torch.randint(3, (k + 1,), generator=gen)]
    top_p = torch.tensor([1.0, 0.9, 0.7])[torch.randint(3, (k + 1,), generator=gen)]
    params = dict(
        temperature=temperature, top_p=top_p, vocab_size=vocab, bitmask=pack_bitmask(allowed)
    )
    return (
        probs_from_logits(target_logits, **params),
        probs_from_logits(draft_logits, **params),
    )


def _run_positions(target, draft, samples: int, seed: int, *, ragged: bool):
    k = draft.shape[0] - 1
    gen = torch.Generator().manual_seed(seed)
    draft_probs = draft[:k].expand(samples, k, -1)  # [N, K, V]
    target_probs = target.expand(samples, k + 1, -1)  # [N, K+1, V]
    draft_ids = sample_from_probs(draft_probs.reshape(samples * k, -1), generator=gen).view(
        samples, k
    )
    num_drafts = torch.randint(k + 1, (samples,), generator=gen) if ragged else None
    out, num_accepted = rejection_sample(
        draft_ids, draft_probs, target_probs, num_draft_tokens=num_drafts, generator=gen
    )
    return out, num_accepted


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("ragged", [False, True])
def test_per_position_law_matches_target(k: int, ragged: bool) -> None:
    target, draft = _position_problem(k, seed=k + 31 * ragged)
    out, num_accepted = _run_positions(target, draft, 20_000, seed=k, ragged=ragged)
    vocab = target.shape[1]
    for i in range(k + 1):
        emitted = num_accepted >= i  # position i holds an emitted token
        if int(emitted.sum()) < 500:
            continue
        counts = np.bincount(out[emitted, i].numpy(), minlength=vocab)
        assert chi_square_pvalue(counts, target[i].double().numpy()) > PASS_P, f"position {i}"


def test_per_position_check_detects_recovery_from_p(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sampler.rejection, "residual_weights_", lambda target, draft: target)
    target, draft = _position_problem(4, seed=4)
    out, _ = _run_positions(target, draft, 20_000, seed=4, ragged=False)
    counts = np.bincount(out[:, 0].numpy(), minlength=target.shape[1])
    assert chi_square_pvalue(counts, target[0].double().numpy()) < FAIL_P
