"""The garbage collector while serving: `HeapFreezer` keeps full collections off the
long-lived heap, `GcPauses` times every collection (exported as `specgate_gc_pause_seconds`).

A full (generation 2) collection walks every container object the process holds: the
tokenizer's tables, the grammar backends' vocabularies, the models' modules. Measured in
`specgate serve` (Zen 4, Qwen2.5-Coder 1.5B + 0.5B, 12 SQL requests): 229-374 ms each,
three while serving, each stopping the engine thread mid-generation. Nearly everything
there lives as long as the process, and the requests' own garbage is freed by reference
counting, so those walks find nothing (vLLM, SGLang and TensorRT-LLM freeze their startup
heap for the same reason).

Contract:
- `freeze(reason)`: `gc.collect()` then `gc.freeze()`: every object alive now moves to the
  permanent generation, which collections never walk; returns how many objects are frozen.
  The collect first means no garbage cycle alive at that moment is frozen with them.
- `after_compile(family)`: the first compiled grammar of a family may build per-vocabulary
  tables that live as long as the process (schema-aware SQL's scope vocabulary: ~1.8 s to
  build, a few MB); the heap is frozen again then, once per family (so at most one freeze
  per grammar family over the process's life).
- Disabled (`enabled=False`, `specgate serve --gc-freeze off`): does nothing.
- What it costs: objects frozen are never collected, so a cycle that becomes garbage later
  among them stays in memory (objects replaced after startup are few here: bounded).

`GcPauses`: `install()` adds a `gc.callbacks` hook timing each collection per generation
into fixed buckets (`PAUSE_BUCKETS_S`); `uninstall()` removes it. The hook only bumps plain
counters (no lock: a collection never runs inside another, and taking a lock a collecting
thread may hold would deadlock). `collect()` is a Prometheus collector over them.

Process-wide by nature (the collector is); only the gateway calls it. Knows nothing of
requests or engines.
"""

from __future__ import annotations

import bisect
import gc
import threading
import time
from typing import Any

from gateway.histograms import histogram_family

PAUSE_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class HeapFreezer:
    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.freezes: list[str] = []  # the reasons, in order
        self._families: set[str] = set()
        self._lock = threading.Lock()

    def freeze(self, reason: str) -> int:
        """Collect, then freeze everything alive; the number of objects frozen (0: disabled)."""
        if not self.enabled:
            return 0
        gc.collect()
        gc.freeze()
        self.freezes.append(reason)
        return gc.get_freeze_count()

    def after_compile(self, family: str) -> bool:
        """Freeze again after the first compiled grammar of `family`; whether it did."""
        with self._lock:
            if not self.enabled or family in self._families:
                return False
            self._families.add(family)
        self.freeze(f"first {family} grammar")
        return True


class GcPauses:
    """Collection times per generation (0, 1, 2), bucketed by PAUSE_BUCKETS_S plus overflow."""

    def __init__(self) -> None:
        self.counts = [[0] * (len(PAUSE_BUCKETS_S) + 1) for _ in range(3)]
        self.sums = [0.0, 0.0, 0.0]
        self._started = 0.0

    def _hook(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        seconds = time.perf_counter() - self._started
        generation = min(int(info.get("generation", 2)), 2)
        self.counts[generation][bisect.bisect_left(PAUSE_BUCKETS_S, seconds)] += 1
        self.sums[generation] += seconds

    def install(self) -> None:
        if self._hook not in gc.callbacks:
            gc.callbacks.append(self._hook)

    def uninstall(self) -> None:
        while self._hook in gc.callbacks:
            gc.callbacks.remove(self._hook)

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        yield histogram_family(
            "specgate_gc_pause_seconds", "Garbage collector pauses (the whole process stops), by generation",
            ["generation"], PAUSE_BUCKETS_S,
            [([str(generation)], list(self.counts[generation]), self.sums[generation]) for generation in range(3)])
