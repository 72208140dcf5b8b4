"""OutputLengths: the engine's record of how long finished outputs ran, per kind of request,
and the remaining length it predicts for a request under way.

Why: before the draft model's first drafting step it must prefill the prompt (the catch-up,
`engine.pacing.adaptive`). Whether that pays depends on how many tokens are still to come, which
the engine cannot know, but can learn: answers to one JSON schema, one tool set or one SQL
schema have similar lengths. The prediction lets adaptive K pay the catch-up at once where
past answers say it pays, instead of renting plain steps first (learning-augmented ski
rental, Purohit et al. 2018); where nothing is recorded it predicts nothing and the rental
stays the rule.

Contract:
- `record(keys, length=n, truncated=t)` stores one finished output under every key in `keys`
  (the caller passes the most specific first: the grammar's exact spec, then its family, then
  its kind: `engine.pacing.pacing_keys`);
  `truncated` (finish_reason `length`) marks a censored output: its length L is only known to
  be >= n. Each key keeps its last `window` records; at most `max_keys` keys are kept, the
  least recently recorded dropped first (a server sees unboundedly many distinct schemas).
- `expected_remaining(keys, generated=g, room=r)` predicts `min(L - g, r)` (the tokens still
  to come, capped by the room the request has left) from the records that determine it: every
  uncensored one, and a censored one only where n >= g + r (it then contributes r; a shorter
  censored output, e.g. a 4-token warm-up cut by its max_tokens, says nothing about this
  request's rest and is skipped). The first key holding at least `min_records` such records
  decides: the mean over those longer than g (E[remaining | the output is still running]);
  None when no key holds enough, or when the request already ran past all of the deciding
  key's (beyond experience: the caller falls back to the rental). `predict` gives the same
  value with the key that decided it.
Pure bookkeeping, not thread-safe (the engine's loop is its one caller); knows nothing about
models, costs or grammars beyond the keys it is given.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Sequence


class OutputLengths:
    def __init__(self, *, window: int = 64, min_records: int = 1, max_keys: int = 4096) -> None:
        if window < 1 or min_records < 1 or max_keys < 1:
            raise ValueError("window, min_records and max_keys must be >= 1")
        self.window = window
        self.min_records = min_records
        self.max_keys = max_keys
        self._lengths: OrderedDict[Hashable, deque[tuple[int, bool]]] = OrderedDict()

    def record(self, keys: Sequence[Hashable], *, length: int, truncated: bool = False) -> None:
        """One finished output of `length` tokens (`truncated`: stopped by a limit, so the
        output would have run at least that long)."""
        if length < 0:
            raise ValueError(f"length must be >= 0, got {length}")
        for key in keys:
            self._lengths.setdefault(key, deque(maxlen=self.window)).append((length, truncated))
            self._lengths.move_to_end(key)
        while len(self._lengths) > self.max_keys:
            self._lengths.popitem(last=False)

    def expected_remaining(self, keys: Sequence[Hashable], *, generated: int, room: int) -> float | None:
        """Mean of min(L - generated, room) over the deciding key's records that determine it
        and ran past `generated` (None: no key has `min_records` such records, or none ran
        that far)."""
        return self.predict(keys, generated=generated, room=room)[0]

    def predict(self, keys: Sequence[Hashable], *, generated: int, room: int) -> tuple[float | None, Hashable | None]:
        """(`expected_remaining`, the key that decided it; None where no key holds enough)."""
        for key in keys:
            usable = [n for n, truncated in self._lengths.get(key, ()) if not truncated or n >= generated + room]
            if len(usable) >= self.min_records:
                longer = [min(n - generated, room) for n in usable if n > generated]
                return (sum(longer) / len(longer) if longer else None), key
        return None, None

    def count(self, key: Hashable) -> int:
        return len(self._lengths.get(key, ()))
