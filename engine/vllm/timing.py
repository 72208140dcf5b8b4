"""PluginTimes: where one vLLM worker's speculative steps spend their host time, and how much
of it is specgate's plugin.

Filled by the plugin (`engine.vllm.plugin`) in the worker process, read back through vLLM's
`collective_rpc("specgate_plugin_times")` (`as_dict()`; `reset=True` zeroes it).

- `step(n_tokens, masked=..., ...)`: one runner step (`execute_model` + `sample_tokens`: the
  target forward, rejection sampling and the draft loop), keyed by the step's scheduled token
  count (at batch 1: 1 + the drafts the scheduler kept) and whether any draft was masked
  ("5" / "5m"), so the cost of a step per verified position and per draft path shows.
- `add(phase, seconds)`: the plugin's own host time, by phase:
  rows (reading the input batch), compile (a new request's matcher), sync (matchers advanced
  by the accepted tokens), fill (bitmask fill), apply (mask onto the logits, dead-end check),
  advance (matchers through the drafts), rollback, cast (the fp32 copy of the draft logits
  the plugin masks), wrap (the rest of the wrappers), step_k (per-step draft length:
  observing and choosing, `engine.vllm.step_k_runner`).
- `share` = plugin seconds / step seconds over the steps timed.

Invariants: every figure is a sum of `time.perf_counter()` differences taken in the worker;
nothing is estimated. Knows nothing of vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PHASES = ("rows", "compile", "sync", "fill", "apply", "advance", "rollback", "cast", "wrap", "step_k")


@dataclass
class _StepBucket:
    steps: int = 0
    execute_s: float = 0.0  # execute_model: target forward (+ the scheduler's grammar bitmask apply)
    sample_s: float = 0.0  # sample_tokens: rejection sampling + the draft loop
    propose_s: float = 0.0  # of sample_s: propose_draft_token_ids (draft forwards + plugin)


@dataclass
class PluginTimes:
    phase_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    buckets: dict[str, _StepBucket] = field(default_factory=dict)  # "<tokens>[m]" -> bucket
    masked_steps: int = 0  # steps where at least one row's draft was masked

    def add(self, phase: str, seconds: float) -> None:
        self.phase_s[phase] += seconds

    def step(self, n_tokens: int, *, masked: bool, execute_s: float, sample_s: float, propose_s: float) -> None:
        bucket = self.buckets.setdefault(f"{int(n_tokens)}{'m' if masked else ''}", _StepBucket())
        bucket.steps += 1
        bucket.execute_s += execute_s
        bucket.sample_s += sample_s
        bucket.propose_s += propose_s

    def reset(self) -> None:
        self.phase_s = dict.fromkeys(PHASES, 0.0)
        self.buckets = {}
        self.masked_steps = 0

    @property
    def plugin_s(self) -> float:
        return sum(self.phase_s.values())

    @property
    def step_s(self) -> float:
        return sum(b.execute_s + b.sample_s for b in self.buckets.values())

    @property
    def steps(self) -> int:
        return sum(b.steps for b in self.buckets.values())

    def as_dict(self) -> dict[str, Any]:
        step_s = self.step_s
        return {
            "steps": self.steps,
            "masked_steps": self.masked_steps,
            "step_s": step_s,
            "plugin_s": self.plugin_s,
            "share": self.plugin_s / step_s if step_s else None,
            "phase_s": dict(self.phase_s),
            "by_tokens": {n: {"steps": b.steps, "execute_s": b.execute_s, "sample_s": b.sample_s,
                              "propose_s": b.propose_s}
                          for n, b in sorted(self.buckets.items(), key=lambda kv: (int(kv[0].rstrip("m")), kv[0]))},
        }


def merge(dicts: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum `as_dict()` results (one per worker; a single worker on CPU)."""
    out = PluginTimes()
    for d in dicts:
        for phase, s in d.get("phase_s", {}).items():
            out.phase_s[phase] = out.phase_s.get(phase, 0.0) + float(s)
        out.masked_steps += int(d.get("masked_steps", 0))
        for n, b in d.get("by_tokens", {}).items():
            bucket = out.buckets.setdefault(str(n), _StepBucket())
            bucket.steps += int(b["steps"])
            bucket.execute_s += float(b["execute_s"])
            bucket.sample_s += float(b["sample_s"])
            bucket.propose_s += float(b["propose_s"])
    return out.as_dict()
