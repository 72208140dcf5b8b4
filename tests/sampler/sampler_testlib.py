"""Test helpers for the sampler's law checks: small worlds of masked p/q, exact laws, chi-square.

A *world* gives, for every prefix of drafted tokens, a grammar-like mask and target/draft
logits over a tiny vocabulary, so that p and q depend on the context (prefix). Everything is
seeded and computed with the production transform ``probs_from_logits``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats

from sampler import pack_bitmask, probs_from_logits


@dataclass
class World:
    """Context-dependent masked distributions over prefixes of length 0..depth."""

    vocab: int
    depth: int
    prefixes: list[tuple[int, ...]]
    index: dict[tuple[int, ...], int]
    target: torch.Tensor  # [P, V] float32, masked
    draft: torch.Tensor  # [P, V] float32, masked (same mask, same params)
    draft_unmasked: torch.Tensor  # [P, V] float32, no mask
    allowed: torch.Tensor  # [P, V] bool

    # Exact laws use float64 rows renormalized, so identities hold to ~1e-15.
    def p(self, prefix: tuple[int, ...]) -> np.ndarray:
        return _normalized(self.target[self.index[prefix]])

    def q(self, prefix: tuple[int, ...]) -> np.ndarray:
        return _normalized(self.draft[self.index[prefix]])

    def q_unmasked(self, prefix: tuple[int, ...]) -> np.ndarray:
        return _normalized(self.draft_unmasked[self.index[prefix]])

    def row_offset(self, length: int) -> int:
        """Row of the first prefix of ``length`` (prefixes are stored by length, then base-V)."""
        return sum(self.vocab**j for j in range(length))


def _normalized(row: torch.Tensor) -> np.ndarray:
    values = row.double().numpy()
    return values / values.sum()


def make_world(
    *,
    vocab: int,
    depth: int,
    seed: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    draft_noise: float = 1.5,
    allow_prob: float = 0.6,
) -> World:
    """Random masks (each allowing at least one token) and target/draft logits per prefix."""
    prefixes = [p for n in range(depth + 1) for p in itertools.product(range(vocab), repeat=n)]
    gen = torch.Generator().manual_seed(seed)
    count = len(prefixes)
    allowed = torch.rand(count, vocab, generator=gen) < allow_prob  # [P, V]
    forced = torch.randint(vocab, (count,), generator=gen)
    allowed[torch.arange(count), forced] = True
    target_logits = 2.0 * torch.randn(count, vocab, generator=gen)
    draft_logits = target_logits + draft_noise * torch.randn(count, vocab, generator=gen)
    bitmask = pack_bitmask(allowed)
    params = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    target = probs_from_logits(target_logits, bitmask=bitmask, **params)
    draft = probs_from_logits(draft_logits, bitmask=bitmask, **params)
    draft_unmasked = probs_from_logits(draft_logits, **params)
    return World(
        vocab=vocab,
        depth=depth,
        prefixes=prefixes,
        index={p: i for i, p in enumerate(prefixes)},
        target=target,
        draft=draft,
        draft_unmasked=draft_unmasked,
        allowed=allowed,
    )


def target_law(world: World, length: int) -> dict[tuple[int, ...], float]:
    """Exact law of ``length`` steps of plain masked sampling from the target."""
    law: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(length):
        nxt: dict[tuple[int, ...], float] = {}
        for seq, prob in law.items():
            for y, py in enumerate(world.p(seq)):
                if py > 0:
                    nxt[seq + (y,)] = prob * py
        law = nxt
    return law


def complete(world: World, law: dict[tuple[int, ...], float], length: int) -> dict:
    """Extend variable-length emitted sequences to ``length`` tokens by plain target sampling."""
    out: dict[tuple[int, ...], float] = {}
    for seq, prob in law.items():
        for tail, tail_prob in _tails(world, seq, length - len(seq)):
            out[seq + tail] = out.get(seq + tail, 0.0) + prob * tail_prob
    return out


def _tails(
    world: World, prefix: tuple[int, ...], n: int
) -> Iterable[tuple[tuple[int, ...], float]]:
    if n == 0:
        yield (), 1.0
        return
    for y, py in enumerate(world.p(prefix)):
        if py > 0:
            for tail, prob in _tails(world, prefix + (y,), n - 1):
                yield (y,) + tail, py * prob


def scheme_law(world: World, k: int, *, variant: str = "exact") -> dict[tuple[int, ...], float]:
    """Exact law of the tokens one speculative step emits, by enumerating drafts.

    Variants: ``exact`` (masked q for drafting, ratio and residual); ``recover_from_p`` (the
    recovered token is drawn from p instead of (p - q)+); ``mismatched_q`` (drafts drawn from
    masked q, ratio and residual computed with unmasked q); ``unmasked`` (unmasked q
    throughout: still exact, only slower); ``truncate`` (unmasked q; the step stops at the
    first grammar-invalid draft and samples plain p there, vLLM V1's scheduler behaviour).
    """
    law: dict[tuple[int, ...], float] = {}

    def emit(seq: tuple[int, ...], prob: float) -> None:
        law[seq] = law.get(seq, 0.0) + prob

    def step(prefix: tuple[int, ...], prob: float, i: int) -> None:
        target = world.p(prefix)
        if i == k:  # bonus
            for y, py in enumerate(target):
                emit(prefix + (y,), prob * py)
            return
        drawn = (
            world.q(prefix)
            if variant in ("exact", "recover_from_p", "mismatched_q")
            else world.q_unmasked(prefix)
        )
        ratio_q = (
            world.q(prefix) if variant in ("exact", "recover_from_p") else world.q_unmasked(prefix)
        )
        for x, qx in enumerate(drawn):
            if qx <= 0:
                continue
            if variant == "truncate" and target[x] <= 0:  # invalid draft: stop speculating
                for y, py in enumerate(target):
                    emit(prefix + (y,), prob * qx * py)
                continue
            accept = min(1.0, target[x] / ratio_q[x])
            step(prefix + (x,), prob * qx * accept, i + 1)
            residual = target if variant == "recover_from_p" else np.clip(target - ratio_q, 0, None)
            if residual.sum() <= 0:
                residual = target
            residual = residual / residual.sum()
            for y, ry in enumerate(residual):
                emit(prefix + (y,), prob * qx * (1 - accept) * ry)

    step((), 1.0, 0)
    return law


def total_variation(a: dict, b: dict) -> float:
    keys = set(a) | set(b)
    return 0.5 * sum(abs(a.get(key, 0.0) - b.get(key, 0.0)) for key in keys)


def chi_square_pvalue(observed: np.ndarray, expected_probs: np.ndarray) -> float:
    """Goodness of fit of counts to a law; 0.0 if any count falls where the law has no mass.

    Cells with expected count below 5 are pooled into one cell.
    """
    observed = np.asarray(observed, dtype=np.float64)
    expected_probs = np.asarray(expected_probs, dtype=np.float64)
    if observed[expected_probs <= 0].sum() > 0:
        return 0.0
    total = observed.sum()
    expected = expected_probs / expected_probs.sum() * total
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    if len(obs) < 2:
        return 1.0
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def encode(seqs: torch.Tensor, vocab: int) -> torch.Tensor:
    """Rows of ``[N, L]`` token ids → integers in base ``vocab`` (for counting joint laws)."""
    codes = torch.zeros(seqs.shape[0], dtype=torch.long)
    for j in range(seqs.shape[1]):
        codes = codes * vocab + seqs[:, j]
    return codes


def simulate(
    world: World,
    k: int,
    samples: int,
    *,
    seed: int,
    draft_from: str = "masked",
    sampler_draft_probs: str = "masked",
    truncate_invalid: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``sampler.rejection_sample`` on ``samples`` independent rows of one speculative step.

    Drafts are drawn sequentially from the world's draft law (``draft_from``), the sampler gets
    ``sampler_draft_probs`` as ``draft_probs`` (a mismatch models an engine bug), and with
    ``truncate_invalid`` drafts stop at the first grammar-invalid one (vLLM V1 scheduler).
    Emitted sequences are completed to ``k + 1`` tokens by plain target sampling, so the result
    ``[samples, k+1]`` must have the law of ``k + 1`` plain masked target steps. Also returns
    ``num_accepted``.
    """
    from sampler import rejection_sample, sample_from_probs

    gen = torch.Generator().manual_seed(seed)
    tables = {"masked": world.draft, "unmasked": world.draft_unmasked}
    code = torch.zeros(samples, dtype=torch.long)
    rows, drafts = [], []
    for i in range(k):
        row = world.row_offset(i) + code
        x = sample_from_probs(tables[draft_from][row], generator=gen)
        rows.append(row)
        drafts.append(x)
        code = code * world.vocab + x
    rows.append(world.row_offset(k) + code)
    row_index = torch.stack(rows, dim=1)  # [N, K+1]
    draft_ids = torch.stack(drafts, dim=1) if k else torch.zeros(samples, 0, dtype=torch.long)
    num_drafts = torch.full((samples,), k, dtype=torch.long)
    if truncate_invalid and k:
        valid = world.allowed[row_index[:, :k], draft_ids]  # [N, K]
        invalid = torch.cat([~valid, torch.ones(samples, 1, dtype=torch.bool)], dim=1)
        num_drafts = invalid.to(torch.int8).argmax(dim=1)
    out, num_accepted = rejection_sample(
        draft_ids,
        tables[sampler_draft_probs][row_index[:, :k]],
        world.target[row_index],
        num_draft_tokens=num_drafts,
        generator=gen,
    )
    seq = out.clone()
    code = torch.zeros(samples, dtype=torch.long)
    for i in range(k + 1):
        fresh = sample_from_probs(world.target[world.row_offset(i) + code], generator=gen)
        seq[:, i] = torch.where(i > num_accepted, fresh, seq[:, i])
        code = code * world.vocab + seq[:, i]
    return seq, num_accepted


def sequence_pvalue(world: World, seqs: torch.Tensor) -> float:
    """Chi-square p-value of full sequences ``[N, L]`` against ``L`` plain target steps."""
    length = seqs.shape[1]
    law = target_law(world, length)
    expected = np.zeros(world.vocab**length)
    for seq, prob in law.items():
        expected[int(encode(torch.tensor([seq]), world.vocab)[0])] = prob
    observed = np.bincount(encode(seqs, world.vocab).numpy(), minlength=world.vocab**length)
    return chi_square_pvalue(observed, expected)
