"""Drafts from history: what earlier outputs of the same tenant and grammar wrote after the
text this sequence ends with.

An agent calls the same tools again with new arguments, a Text2SQL service writes the same
query shapes, a JSON service the same values: the continuation after the last few tokens is
often one seen before. `HistoryIndex` keeps recent outputs (each with the last `N_MAX` prompt
tokens before it, so the first output token has a context too) and maps every n-gram of them
(n in N_MIN..N_MAX) to where it last ended; `continuation(scope, context, k=)` returns the up to
`k` tokens that followed the longest n-gram ending `context`, never running past the end of
the output they come from.

Scopes: a record is stored and looked up under `(tenant, grammar)` (the caller's key: the
exact grammar, `engine.pacing.pacing_keys`). The tenant (the gateway's hash of the caller's
credentials and `user`) keeps one tenant's text, and the timing its drafts give, away from
another's; the exact grammar keeps one tool set's calls, or one schema's values, from being
proposed where another's are written (measured: drafting from the whole "tools" family's
history accepted 26% of its drafts on calls to other tools, and cost more steps than it saved).

Bounded memory: at most `max_tokens` tokens over all scopes (each n-gram adds
N_MAX - N_MIN + 1 dictionary entries per token); past it the least recently used scope loses
its oldest records first; a scope's n-gram map is rebuilt from what remains once the tokens
dropped from it reach those it holds.

Exactness: a history draft is a deterministic function of the sequence so far, i.e. a draw
from a one-hot q at that token; rejection sampling is exact for any q, so the output law is
unchanged. What history changes is only how often the drafts are accepted, and a rejected
history draft at the head of a chain costs the step the drafts after it would have won. Two
gates: a scope whose history drafts were accepted less than `MIN_ACCEPTANCE` of the time
(after `TRIAL` judged ones) proposes nothing, its record decaying by `DECAY` with every output
recorded in it, so it is tried again later; a sequence stops asking once more than
`MAX_MISSES` of its own history drafts were rejected while fewer than `MIN_ACCEPTANCE` of
them were accepted. The law holds, but the sample a seeded
request draws depends on its drafts: the decoder gives no history to a request with a `seed`
and temperature > 0, so that the same request with the same seed gives the same output.
Pure bookkeeping over token ids: knows nothing about grammars, models or text; not
thread-safe (the engine's decode loop is its one caller).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

N_MIN = 2  # the shortest context a history draft may follow (one token matches too much)
N_MAX = 6
TRIAL = 8  # judged history drafts before a scope's acceptance decides
MIN_ACCEPTANCE = 0.5
DECAY = 0.75  # a scope's acceptance record, per output recorded in it
MAX_MISSES = 2  # rejected history drafts a sequence tolerates before its own acceptance decides


@dataclass
class _Scope:
    records: deque[tuple[int, ...]] = field(default_factory=deque)
    tokens: int = 0
    grams: dict[tuple[int, ...], tuple[int, int]] = field(default_factory=dict)  # gram -> (record serial, end)
    first_serial: int = 0  # serial of records[0]
    dropped: int = 0  # tokens dropped since the map was last rebuilt
    judged: float = 0.0  # history drafts judged (decayed), and of those accepted
    accepted: float = 0.0

    def index(self, serial: int, record: tuple[int, ...], *, output_start: int) -> None:
        """Map the record's n-grams to where they end, for ends at output positions with a
        token after them (a continuation never starts inside the prompt tail)."""
        for end in range(max(output_start, N_MIN), len(record)):
            for n in range(N_MIN, min(N_MAX, end) + 1):
                self.grams[tuple(record[end - n:end])] = (serial, end)

    def rebuild(self) -> None:
        self.grams = {}
        self.dropped = 0
        for offset, record in enumerate(self.records):
            self.index(self.first_serial + offset, record[1:], output_start=record[0])


class HistoryIndex:
    def __init__(self, *, max_tokens: int = 65536) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self.max_tokens = max_tokens
        self._scopes: OrderedDict[Hashable, _Scope] = OrderedDict()
        self._tokens = 0

    @property
    def tokens(self) -> int:
        """Tokens held over all scopes (prompt tails included)."""
        return self._tokens

    def record(self, scope: Hashable, *, prompt: Sequence[int], output: Sequence[int]) -> None:
        """Store one finished output (and the last N_MAX tokens of its prompt) under `scope`."""
        if not output:
            return
        tail = tuple(prompt[-N_MAX:])
        body = (tail + tuple(output))[-self.max_tokens:]
        output_start = max(0, len(body) - len(output))
        entry = self._scopes.get(scope)
        if entry is None:
            entry = self._scopes[scope] = _Scope()
        self._scopes.move_to_end(scope)
        serial = entry.first_serial + len(entry.records)
        entry.records.append((output_start, *body))  # element 0: where the output starts
        entry.tokens += len(body)
        entry.judged *= DECAY
        entry.accepted *= DECAY
        self._tokens += len(body)
        entry.index(serial, body, output_start=output_start)
        self._evict()

    def _evict(self) -> None:
        """Drop the oldest records of the least recently used scopes until the bound holds.
        A scope's map keeps pointing at dropped records (lookups skip them) until the tokens
        dropped since its last rebuild reach what it holds: then it is rebuilt (amortized
        O(1) per token)."""
        while self._tokens > self.max_tokens:
            scope, entry = next(iter(self._scopes.items()))
            removed = entry.records.popleft()
            entry.first_serial += 1
            size = len(removed) - 1
            entry.tokens -= size
            entry.dropped += size
            self._tokens -= size
            if not entry.records:
                del self._scopes[scope]
            elif entry.dropped >= entry.tokens:
                entry.rebuild()

    def observe(self, scope: Hashable, *, judged: int, accepted: int) -> None:
        """History drafts of `scope` the verify judged, and of those accepted."""
        entry = self._scopes.get(scope)
        if entry is not None:
            entry.judged += judged
            entry.accepted += accepted

    def trusted(self, scope: Hashable) -> bool:
        """Whether `scope`'s history drafts are worth proposing (on trial, or accepted enough)."""
        entry = self._scopes.get(scope)
        return entry is not None and (entry.judged < TRIAL or entry.accepted >= MIN_ACCEPTANCE * entry.judged)

    def continuation(self, scope: Hashable, context: Sequence[int], *, k: int) -> list[int]:
        """Up to `k` tokens that followed the longest n-gram (N_MAX down to N_MIN) ending
        `context` in `scope`'s most recent record holding it; [] when none matches (the
        gates are the caller's: `trusted`)."""
        entry = self._scopes.get(scope)
        if entry is None or k <= 0:
            return []
        for n in range(min(N_MAX, len(context)), N_MIN - 1, -1):
            hit = entry.grams.get(tuple(context[-n:]))
            if hit is None:
                continue
            serial, end = hit
            offset = serial - entry.first_serial
            if offset < 0:
                continue  # evicted (the map is rebuilt lazily)
            record = entry.records[offset]
            return list(record[1 + end: 1 + end + k])
        return []


@dataclass
class HistoryDrafts:
    """One sequence's view of the history: its scope, and its own record of how history
    drafts fared (the decoder reports every judged one)."""

    index: HistoryIndex
    scope: Hashable
    judged: int = 0
    accepted: int = 0

    @property
    def trusted(self) -> bool:
        own = self.judged - self.accepted <= MAX_MISSES or self.accepted >= MIN_ACCEPTANCE * self.judged
        return own and self.index.trusted(self.scope)

    def continuation(self, context: Sequence[int], *, k: int) -> list[int]:
        return self.index.continuation(self.scope, context, k=k) if self.trusted else []

    def observe(self, *, judged: int, accepted: int) -> None:
        self.judged += judged
        self.accepted += accepted
        self.index.observe(self.scope, judged=judged, accepted=accepted)
