"""What the benchmark scripts share: where ../shared lies, a nearest-rank percentile and the
results-file writer.

`SPECGATE_SHARED` overrides the default `<repo>/../shared`. Knows nothing of what is measured.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

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


def write_report(text: str, path: str | os.PathLike[str]) -> None:
    """Write a Markdown report (parent folders made) and print it."""
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)


def write_json(document: Any, path: str | os.PathLike[str]) -> None:
    """Write a results document as indented JSON (parent folders made; non-JSON values as str)."""
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1, default=str) + "\n")
