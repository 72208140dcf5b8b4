"""FillTimes: how long a matcher's mask fills took, as counts per latency bucket.

Contract:
- `observe_ns(ns)` counts one fill of `ns` nanoseconds in the first bucket whose upper bound
  (`FILL_BUCKETS_S`, seconds, inclusive, as Prometheus `le`) holds it, else in the overflow
  bucket; `sum_s` and `count` accumulate alongside.
- `merge(other)` adds another's counts (same buckets by construction).
- The bounds include 500 µs and 1 ms, the mask budgets (JSON fill p99 <= 500 µs, schema-aware
  SQL p99 <= 1 ms: docs/sql.md), so the share of fills over a budget is one bucket away.

Pure counters: no clock of its own, no locks (one matcher is driven by one thread; the
gateway merges finished requests' counts). Knows nothing of metrics exporters or engines.
"""

from __future__ import annotations

import bisect

# upper bounds in seconds; the last bucket (above 0.1 s) is the overflow
FILL_BUCKETS_S = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 1e-1)
_BOUNDS_NS = tuple(round(bound * 1e9) for bound in FILL_BUCKETS_S)


class FillTimes:
    """Fill-time counts per bucket of FILL_BUCKETS_S (plus overflow), their sum and count."""

    __slots__ = ("counts", "sum_s")

    def __init__(self) -> None:
        self.counts = [0] * (len(FILL_BUCKETS_S) + 1)
        self.sum_s = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)

    def observe_ns(self, ns: int) -> None:
        self.counts[bisect.bisect_left(_BOUNDS_NS, ns)] += 1
        self.sum_s += ns * 1e-9

    def merge(self, other: FillTimes) -> None:
        for index, count in enumerate(other.counts):
            self.counts[index] += count
        self.sum_s += other.sum_s

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: the bucket bounds (s), the counts per bucket (one more: overflow),
        their sum (s) and count."""
        return {"buckets_s": list(FILL_BUCKETS_S), "counts": list(self.counts),
                "sum_s": self.sum_s, "count": self.count}

    def __repr__(self) -> str:
        return f"FillTimes(count={self.count}, sum_s={self.sum_s:.6f})"
