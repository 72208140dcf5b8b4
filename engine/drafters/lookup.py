"""Token-sequence lookup shared by prompt lookup (n-gram) and Predicted Outputs: find the
latest earlier occurrence of the context's last n tokens (n from n_max down to n_min) in a
corpus and return what followed it. Vectorized over corpus positions (torch unfold).
Knows nothing about grammars or models."""

from __future__ import annotations

import torch


def lookup_continuation(
    context: list[int], corpus: torch.Tensor, *, n_max: int, n_min: int, k: int, exclude_tail: bool
) -> list[int]:
    """Up to k tokens following the latest match of context[-n:] in `corpus` (long [L]).

    `exclude_tail`: the corpus ends with the context itself (prompt lookup), so a match must
    end before the corpus does and the trivial match at the very end is skipped.
    """
    length = corpus.numel()
    for n in range(min(n_max, len(context)), n_min - 1, -1):
        if length <= n:
            continue
        suffix = torch.tensor(context[-n:], dtype=torch.long)  # [n]
        windows = corpus.unfold(0, n, 1)  # [L-n+1, n]
        limit = length - n  # a match starting here has nothing after it
        hits = torch.nonzero((windows[:limit] == suffix).all(dim=1)).flatten()  # [h]
        if exclude_tail:
            hits = hits[hits + n < length]
        if hits.numel():
            start = int(hits[-1]) + n
            return corpus[start : start + k].tolist()
    return []
