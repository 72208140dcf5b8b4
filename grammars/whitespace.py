"""WhitespaceCap: bound runs of whitespace across tokens, as a mask and an accept check.

Contract: built once per (tokenizer, chars, limit) from the decoded vocabulary (bytes per
token id). `allowed_after(run)` is an int32 word mask [ceil(V/32)] of the tokens that keep
every whitespace run <= limit when the output currently ends in a run of `run` characters;
`run_after(run, token)` is the run after accepting `token`, or None when it would pass the
limit. Ids past the decoded vocabulary (model padding) carry no whitespace. A backend ANDs
`allowed_after` into its own mask and refuses tokens `run_after` rejects, so a grammar whose
own whitespace is unbounded (cheap masks) still never runs away (vLLM #38696). The cap sees
bytes, not grammar positions: it also bounds runs of spaces inside JSON strings.

Knows nothing of grammars, sampling or HTTP.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from tokenmask import pack_bitmask


class WhitespaceCap:
    """Caps runs of whitespace (the bytes of `chars`) at `limit` characters, across tokens.

    For grammars whose whitespace is an unbounded inline `[ \\t\\n]*` (cheap masks: a
    bounded `{0,n}` repetition makes xgrammar 4x (JSON) to 1000x (SQL) slower) but must
    stay bounded (vLLM #38696). Per token, from the decoded vocabulary, once per tokenizer:
    its leading run, its longest inner run, its trailing run and whether it is all
    whitespace. `allowed_after(run)` is an int32 word mask [W] of the tokens that keep
    every run <= limit after a current trailing run of `run`.
    """

    def __init__(self, decoded_vocab: Sequence[bytes], *, vocab_size: int, limit: int,
                 chars: bytes = b" \t\n") -> None:
        self.limit = limit
        run_re = re.compile(b"[" + re.escape(chars) + b"]+")
        count = len(decoded_vocab)
        self._lead = [0] * count
        self._tail = [0] * count
        self._all_ws = [False] * count
        inner_ok = torch.ones(vocab_size, dtype=torch.bool)
        for token_id, raw in enumerate(decoded_vocab):
            runs = [len(run) for run in run_re.findall(raw)]
            if not runs:
                continue
            stripped = raw.lstrip(chars)
            self._lead[token_id] = len(raw) - len(stripped)
            self._tail[token_id] = len(raw) - len(raw.rstrip(chars))
            self._all_ws[token_id] = not stripped
            if max(runs) > limit:
                inner_ok[token_id] = False
        lead = torch.zeros(vocab_size, dtype=torch.int64)
        lead[:count] = torch.tensor(self._lead, dtype=torch.int64)
        self._masks = [pack_bitmask(inner_ok & (lead <= limit - run)) for run in range(limit + 1)]

    def run_after(self, run: int, token_id: int) -> int | None:
        """The trailing run after `token_id`, or None when it would pass the limit."""
        if token_id >= len(self._lead):
            return 0
        if run + self._lead[token_id] > self.limit:
            return None
        if self._all_ws[token_id]:
            return run + self._lead[token_id]
        return self._tail[token_id]

    def allowed_after(self, run: int) -> torch.Tensor:  # [W] int32
        return self._masks[min(run, self.limit)]


class WhitespaceRuns:
    """One matcher's trailing whitespace run after each accepted token, under an optional
    `WhitespaceCap` (None: no cap, every method is a no-op that allows everything).
    Usage in a matcher: `run = runs.next(token)`; refuse when None; else accept in the
    backend and `runs.push(run)`; `runs.pop(n)` on rollback; `runs.restrict_(row)` after a fill."""

    def __init__(self, cap: WhitespaceCap | None) -> None:
        self.cap = cap
        self._runs = [0]

    def next(self, token_id: int) -> int | None:
        """The run after `token_id`, or None when the cap refuses it (0 without a cap)."""
        return 0 if self.cap is None else self.cap.run_after(self._runs[-1], token_id)

    @property
    def run(self) -> int:
        """The trailing run after the tokens accepted (0 without a cap)."""
        return self._runs[-1]

    def push(self, run: int) -> None:
        if self.cap is not None:
            self._runs.append(run)

    def pop(self, num_tokens: int) -> None:
        if self.cap is not None and num_tokens:
            del self._runs[len(self._runs) - num_tokens:]

    def restrict_(self, row: torch.Tensor) -> None:  # row: int32 [W], in place
        if self.cap is not None:
            row &= self.cap.allowed_after(self._runs[-1])
