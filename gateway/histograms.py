"""`histogram_family`: a Prometheus histogram family from per-bucket counts kept elsewhere.

Counts are per bucket (not cumulative), one per upper bound plus an overflow bucket; the
family's `le` samples are their running sums, `+Inf` the total. Knows nothing of what was
counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client.core import HistogramMetricFamily


def histogram_family(name: str, documentation: str, labels: Sequence[str], bounds: Sequence[float],
                     rows: Iterable[tuple[Sequence[str], Sequence[int], float]]) -> HistogramMetricFamily:
    """`rows`: (label values, counts per bucket [len(bounds) + 1], sum)."""
    family = HistogramMetricFamily(name, documentation, labels=list(labels))
    for values, counts, total in rows:
        cumulative, buckets = 0, []
        for bound, count in zip((*(repr(b) for b in bounds), "+Inf"), counts, strict=True):
            cumulative += count
            buckets.append((bound, float(cumulative)))
        family.add_metric(list(values), buckets, total)
    return family
