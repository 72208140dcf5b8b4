"""Micro-benchmark: vectorized ``rejection_sample`` vs the Python reference on CPU.

Run: ``python -m benchmarks.micro.sampler_bench [--vocab 151936] [--threads N] [--with-probs]``. Prints a table
(B, K, ms per call for each implementation, ratio, mean accepted), and with ``--with-probs``
the cost of ``probs_from_logits`` for the same ``B*(K+1)`` rows with top-p on (the transform
every verification step pays; a full sort of each row, so slow).
Prints only; asserts nothing. Inputs are synthetic: target logits ~ 3·N(0,1), draft logits =
target + N(0,1), so acceptance is moderate and both accepted and recovered paths run.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from sampler import (
    probs_from_logits,
    rejection_sample,
    rejection_sample_reference,
    sample_from_probs,
)


def _time(fn: Callable[[], object], reps: int) -> float:
    """Mean seconds per call over ``reps`` calls after one warm-up call."""
    fn()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps


def _inputs(batch: int, k: int, vocab: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    target_logits = 3 * torch.randn(batch * (k + 1), vocab, generator=gen)
    draft_logits = target_logits + torch.randn(batch * (k + 1), vocab, generator=gen)
    target = target_logits.softmax(-1).view(batch, k + 1, vocab)
    draft = draft_logits.softmax(-1).view(batch, k + 1, vocab)[:, :k].contiguous()
    draft_ids = sample_from_probs(draft.view(batch * k, vocab), generator=gen).view(batch, k)
    return target_logits, draft_ids, draft, target


def _bench_case(
    batch: int, k: int, vocab: int, *, with_probs: bool
) -> tuple[float, float, float, float]:
    """(fast s/call, reference s/call, mean accepted, probs_from_logits s/call) for one shape."""
    target_logits, draft_ids, draft, target = _inputs(batch, k, vocab, seed=batch * 10 + k)
    gen = torch.Generator().manual_seed(0)
    fast_reps, ref_reps = (10, 3) if batch < 64 else (3, 1)  # the reference is slow at B=64
    fast = _time(lambda: rejection_sample(draft_ids, draft, target, generator=gen), fast_reps)
    ref = _time(
        lambda: rejection_sample_reference(draft_ids, draft, target, generator=gen), ref_reps
    )
    _, accepted = rejection_sample(draft_ids, draft, target, generator=gen)
    probs = float("nan")
    if with_probs:  # a full sort of B*(K+1) rows of V: tens of seconds at B=64
        probs = _time(lambda: probs_from_logits(target_logits, temperature=0.8, top_p=0.95), 1)
    return fast, ref, accepted.float().mean().item(), probs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument(
        "--with-probs", action="store_true", help="also time probs_from_logits with top_p=0.95"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, V={args.vocab}, CPU")
    header = f"{'B':>3} {'K':>2} {'fast ms':>9} {'ref ms':>9} {'ref/fast':>9} {'accepted':>9} {'probs ms':>9}"
    print(header)
    print("-" * len(header))
    for batch in (1, 8, 64):
        for k in (4, 8):
            fast, ref, accepted, probs = _bench_case(
                batch, k, args.vocab, with_probs=args.with_probs
            )
            print(
                f"{batch:>3} {k:>2} {fast * 1e3:>9.2f} {ref * 1e3:>9.2f} {ref / fast:>9.1f} "
                f"{accepted:>9.2f} {probs * 1e3:>9.1f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
