"""The plugin's counters across vLLM's processes: each process (EngineCore's scheduler, every
worker) publishes its own counters as one small JSON file in a directory shared by one vLLM
launch; the API / gateway process sums them (`read_totals`) and serves them as Prometheus
metrics (`SpecgateVllmCollector`, on `vllm serve`'s own `/metrics`).

Contract:
- `ensure_stats_dir()` (process 0, from the plugin's `register()`, before vLLM spawns its
  processes): sets `SPECGATE_VLLM_STATS_DIR` to a fresh temporary directory unless it is
  already set; spawned processes inherit it. `stats_dir()` reads it (None: not publishing).
- `Publisher(role).publish(counters, force=...)`: writes `<dir>/<role>-<pid>.json`
  atomically (temp file + rename), at most every `interval_s` unless `force` (a caller
  forces a write whenever a counter that must never go unseen changes, e.g. a cut draft;
  `SPECGATE_VLLM_STATS_INTERVAL_S` sets the default interval, 0.1 s).
  Counters are monotone per process (sums since the process started).
- `read_totals()`: {counter: sum over every file}; a file being replaced or unreadable is
  skipped for that read.
- Knows nothing of vLLM classes; prometheus_client is imported only by the collector.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import Any

ENV = "SPECGATE_VLLM_STATS_DIR"

# name -> Prometheus help text (counters, summed over processes)
METRICS: dict[str, str] = {
    "masked_rows": "Draft rows (request x propose step) whose draft logits the grammar mask covered",
    "steps": "Propose steps with at least one masked row",
    "dead_rows": "Grammar rows whose mask allowed no token (dead end)",
    "refused_rows": "Grammar rows whose matcher refused a token (disagreement with the scheduler)",
    "unmaskable_rows": "Grammar rows the masker cannot mirror (backend, vocabulary): drafted nothing",
    "no_masker_rows": "Grammar rows in a worker without a masker: drafted nothing",
    "limited_rows": "Grammar rows whose drafts were cut to the masked prefix (fallbacks)",
    "cut_drafts": "Draft tokens removed because they could not be masked",
    "ended_drafts": "Draft tokens after a grammar's termination removed before the scheduler",
    "resyncs": "Matcher replays from the request history (preemption, resumption)",
    "reasoning_rows": "Draft rows drawn unmasked because the request was still reasoning (as its target rows)",
    "reasoning_ends": "Draft chains whose drafts ended a request's reasoning (masked from the next row on)",
    "plugin_seconds": "Host seconds spent in the plugin's own work (masks, matchers, wrappers)",
    "step_seconds": "Seconds of the worker steps the plugin timed (target forward + sampling + drafting)",
    "sched_sent_drafts": "Drafts of masked grammar requests handed to the scheduler",
    "sched_kept_drafts": "Of those, drafts the scheduler's grammar check kept for verification",
}


def ensure_stats_dir() -> str:
    path = os.environ.get(ENV)
    if not path:
        path = tempfile.mkdtemp(prefix="specgate-vllm-stats-")
        os.environ[ENV] = path
    return path


def stats_dir() -> pathlib.Path | None:
    path = os.environ.get(ENV)
    return pathlib.Path(path) if path else None


class Publisher:
    def __init__(self, role: str, *, interval_s: float | None = None) -> None:
        self.role = role
        self.interval_s = (float(os.environ.get("SPECGATE_VLLM_STATS_INTERVAL_S", "0.1"))
                           if interval_s is None else interval_s)
        self._last = 0.0

    def publish(self, counters: Mapping[str, float], *, force: bool = False) -> bool:
        """Write this process's counters (rate-limited unless `force`); False if skipped."""
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return False
        root = stats_dir()
        if root is None:
            return False
        self._last = now
        path = root / f"{self.role}-{os.getpid()}.json"
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps({k: float(v) for k, v in counters.items()}))
            os.replace(tmp, path)
        except OSError:
            return False
        return True


def read_totals(root: pathlib.Path | None = None) -> dict[str, float]:
    root = root if root is not None else stats_dir()
    totals: dict[str, float] = {}
    if root is None or not root.is_dir():
        return totals
    for path in sorted(root.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for key, value in data.items():
            if isinstance(value, int | float):
                totals[key] = totals.get(key, 0.0) + float(value)
    return totals


class SpecgateVllmCollector:
    """Prometheus collector: `specgate_vllm_<counter>_total` for every METRICS entry (0 until a
    process publishes), plus `specgate_vllm_plugin_share` = plugin seconds / step seconds."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        totals = read_totals()
        for name, doc in METRICS.items():
            family = CounterMetricFamily(f"specgate_vllm_{name}", doc)
            family.add_metric([], totals.get(name, 0.0))
            yield family
        share = GaugeMetricFamily("specgate_vllm_plugin_share",
                                  "Plugin host seconds / timed step seconds (all workers)")
        step_s = totals.get("step_seconds", 0.0)
        share.add_metric([], totals.get("plugin_seconds", 0.0) / step_s if step_s else 0.0)
        yield share


_REGISTERED = [False]


def register_collector() -> bool:
    """Add the collector to prometheus_client's default registry (what `vllm serve`'s
    `/metrics` serves with one API server), once per process."""
    if _REGISTERED[0]:
        return False
    try:
        from prometheus_client import REGISTRY
    except ImportError:
        return False
    REGISTRY.register(SpecgateVllmCollector())  # type: ignore[arg-type]
    _REGISTERED[0] = True
    return True
