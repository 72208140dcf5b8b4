"""OutputLengths: the engine's record of how long finished outputs ran, per kind of request,
and the remaining length it predicts for a request under way.

Why: before the draft model's first drafting step it must prefill the prompt (the catch-up,
`engine.adaptive`). Whether that pays depends on how many tokens are still to come, which
the engine cannot know, but can learn: answers to one JSON schema, one tool set or one SQL
schema have similar lengths. The prediction lets adaptive K pay the catch-up at once where
past answers say it pays, instead of renting plain steps first (learning-augmented ski
rental, Purohit et al. 2018); where nothing is recorded it predicts nothing and the rental
stays the rule.

Contract:
- `record(keys, length=n, truncated=t)` stores one finished output under every key in `keys`
  (the caller passes the most specific first: e.g. the grammar's exact spec, then its kind);
  `truncated` (finish_reason `length`) marks a lower bound, kept as its value (an
  underestimate: the prediction errs towards the rental). Each key keeps its last `window`
  records.
- `expected_remaining(keys, generated=g, room=r)`: the first key holding at least
  `min_records` outputs decides; it is the mean of `min(L - g, r)` over its outputs longer
  than g (E[remaining | the output is still running], capped by the room the request has
  left); None when no key holds enough outputs, or when the request already ran past all of
  the deciding key's (beyond experience: the caller falls back to the rental).
Pure bookkeeping, not thread-safe (the engine's loop is its one caller); knows nothing about
models, costs or grammars beyond the keys it is given.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence


class OutputLengths:
    def __init__(self, *, window: int = 64, min_records: int = 1) -> None:
        if window < 1 or min_records < 1:
            raise ValueError("window and min_records must be >= 1")
        self.window = window
        self.min_records = min_records
        self._lengths: dict[Hashable, deque[int]] = {}

    def record(self, keys: Sequence[Hashable], *, length: int, truncated: bool = False) -> None:
        """One finished output of `length` tokens (`truncated`: stopped by a limit, so a lower
        bound; it is kept as its value)."""
        del truncated  # an underestimate is the safe side of the rental: kept as is
        if length < 0:
            raise ValueError(f"length must be >= 0, got {length}")
        for key in keys:
            self._lengths.setdefault(key, deque(maxlen=self.window)).append(length)

    def expected_remaining(self, keys: Sequence[Hashable], *, generated: int, room: int) -> float | None:
        """Mean remaining tokens of the deciding key's outputs that ran past `generated`, each
        capped at `room` (None: no key has `min_records` outputs, or none ran that far)."""
        for key in keys:
            lengths = self._lengths.get(key, ())
            if len(lengths) >= self.min_records:
                longer = [n for n in lengths if n > generated]
                return sum(min(n - generated, room) for n in longer) / len(longer) if longer else None
        return None

    def count(self, key: Hashable) -> int:
        return len(self._lengths.get(key, ()))
