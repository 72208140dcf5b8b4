"""What the benchmark scripts share: where ../shared lies and a nearest-rank percentile.

`SPECGATE_SHARED` overrides the default `<repo>/../shared`. Knows nothing of what is measured.
"""

from __future__ import annotations

import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("SPECGATE_SHARED", ROOT.parent / "shared"))
DATA = SHARED / "data"
RESULTS_DIR = ROOT / "benchmarks" / "results"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, q in [0, 1]; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]
