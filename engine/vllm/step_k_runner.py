"""Per-step draft length inside vLLM's V1 model runner: the glue between the runner's step and
`engine.vllm.step_k.StepK` (the choice itself is there, pure).

Opt-in: `SPECGATE_VLLM_STEP_K=1` (read in the worker; the engine sets it from
`VllmOptions.step_k`, off by default; unset or 0: vLLM's configured K every step), or at run time `collective_rpc("specgate_step_k", kwargs={"on": bool})`, which also
returns the worker's state (`applied`: steps per k applied since the last reset, the current
cost estimates and the engine-wide acceptance hazards).
`SPECGATE_VLLM_STEP_K_MIN` (default 0) is the floor. `cycle=[k, ...]` (RPC only, tests) forces
the draft lengths in turn instead of choosing them.

Mechanism: vLLM 0.32's runner passes `scheduler_output.num_spec_tokens_to_schedule` to the
proposer as its draft count (vLLM's own batch-size-keyed dynamic K sets it in the scheduler);
`SpecDecodeBaseProposer.propose` runs the draft model's first forward (its catch-up on the
step's accepted tokens, needed for its KV cache), returns an empty [B, 0] tensor at 0 drafts,
and otherwise runs k-1 further forwards. The runner copies `drafts.shape[1]` columns to the
scheduler, whose next step schedules 1 + len(drafts) tokens per request (it already takes
draft lists cut short at the first grammar-invalid token). `before_propose` lowers that
field for this call only (restored afterwards: the scheduler's object is never left
changed) to the chosen k <= the configured K. Greedy output cannot change: fewer drafts only
mean fewer positions verified (the e2e test checks identity with forced k = 0..K).

Observations, per step: acceptance per request from the drafts this runner proposed for it
last step and the tokens the target accepted (row i of `sampled_token_ids`, -1 placeholders
not counted, minus the bonus token); costs from the step timings the plugin already takes
(`verify_s` = execute_model + sample_tokens - the draft loop, by scheduled tokens) and from
time marks the draft sampler leaves on the proposer (`mark_draft`): first forward = loop start
to the first draft's sample, each further forward = the gap between samples; at k=0 the whole
loop is the first forward.

Not verified (no GPU lent): on an accelerator the accepted counts are read with one device
sync per step before the draft loop (not overlapped, unlike the masker's reads), and vLLM's
async scheduling (the GPU default) may pair a step's `scheduled_spec_decode_tokens` with
sampled ids of another step: under async scheduling per-step K turns itself off (logged
once per worker) unless SPECGATE_VLLM_STEP_K_ASYNC=1.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from engine.vllm.step_k import StepK

ENV = "SPECGATE_VLLM_STEP_K"
ENV_MIN = "SPECGATE_VLLM_STEP_K_MIN"
ENV_ASYNC = "SPECGATE_VLLM_STEP_K_ASYNC"
logger = logging.getLogger("specgate.vllm.step_k")


def _env_on() -> bool:
    return os.environ.get(ENV, "0").strip().lower() not in ("", "0", "false", "off", "no")


def _state(runner: Any) -> dict[str, Any]:
    state = getattr(runner, "_specgate_step_k", None)
    if state is None:
        state = runner._specgate_step_k = {"on": _env_on(), "chooser": None, "cycle": None, "turn": 0,
                                           "proposed": {}, "pending": None, "applied": {}}
    return state


def chooser(runner: Any) -> StepK | None:
    """The runner's StepK when per-step K is on and the drafter is a model proposer."""
    state = _state(runner)
    if not state["on"]:
        return None
    if state["chooser"] is None:
        spec = getattr(runner, "speculative_config", None)
        k_max = int(getattr(spec, "num_speculative_tokens", 0) or 0)
        if k_max < 1:
            state["on"] = False
            return None
        if getattr(runner, "use_async_scheduling", False) and os.environ.get(ENV_ASYNC, "0") != "1":
            logger.warning("specgate: per-step K is off under vLLM's async scheduling (untested there; "
                           "%s=1 forces it)", ENV_ASYNC)
            state["on"] = False
            return None
        k_min = min(max(int(os.environ.get(ENV_MIN, "0") or 0), 0), k_max)
        state["chooser"] = StepK(k_max=k_max, k_min=k_min)
    chosen: StepK = state["chooser"]
    return chosen


def _valid_counts(sampled_token_ids: Any) -> list[int]:
    import torch

    if isinstance(sampled_token_ids, torch.Tensor):
        if sampled_token_ids.numel() == 0:
            return [0] * int(sampled_token_ids.shape[0])
        return [int(n) for n in (sampled_token_ids >= 0).sum(dim=1).tolist()]
    return [sum(1 for t in row if t >= 0) for row in sampled_token_ids]


def before_propose(runner: Any, scheduler_output: Any, sampled_token_ids: Any) -> int | None:
    """Observe last step's acceptance, choose this step's k and set it on `scheduler_output`;
    returns the value to restore (None when per-step K is off or leaves vLLM's K)."""
    step_k = chooser(runner)
    if step_k is None:
        return None
    state = _state(runner)
    req_ids = [str(r) for r in runner.input_batch.req_ids if r is not None]
    verified = getattr(scheduler_output, "scheduled_spec_decode_tokens", None) or {}
    proposed: dict[str, int] = state["proposed"]
    if verified:
        counts = _valid_counts(sampled_token_ids)
        for i, rid in enumerate(runner.input_batch.req_ids):
            drafts = verified.get(rid)
            if not drafts or i >= len(counts):
                continue
            n = proposed.get(str(rid), len(drafts))
            step_k.observe_acceptance(str(rid), num_drafts=n, num_accepted=counts[i] - 1)
    finished = getattr(scheduler_output, "finished_req_ids", None)
    if finished:
        step_k.drop(str(r) for r in finished)
        for rid in finished:
            proposed.pop(str(rid), None)
    configured = int(scheduler_output.num_spec_tokens_to_schedule)
    if state["cycle"]:
        k = int(state["cycle"][state["turn"] % len(state["cycle"])])
        state["turn"] += 1
    else:
        k = step_k.choose(req_ids)
    k = max(0, min(k, configured))
    state["applied"][str(k)] = state["applied"].get(str(k), 0) + 1
    state["proposed"] = dict.fromkeys(req_ids, k)
    state["pending"] = {"k": k, "marks": [], "start": time.perf_counter()}
    drafter = getattr(runner, "drafter", None)
    if drafter is not None:
        drafter._specgate_marks = state["pending"]["marks"]
    if k == configured:
        return None
    scheduler_output.num_spec_tokens_to_schedule = k
    return configured


def after_propose(runner: Any, scheduler_output: Any, restore: int | None) -> None:
    if restore is not None:
        scheduler_output.num_spec_tokens_to_schedule = restore
    state = getattr(runner, "_specgate_step_k", None)
    if state is None or state["pending"] is None:
        return
    state["pending"]["end"] = time.perf_counter()
    drafter = getattr(runner, "drafter", None)
    if drafter is not None:
        drafter._specgate_marks = None


def mark_draft(drafter: Any) -> None:
    """Called by the draft sampler wrapper after each draft position is sampled."""
    marks = getattr(drafter, "_specgate_marks", None)
    if marks is not None:
        marks.append(time.perf_counter())


def draft_split(start: float, end: float, marks: Sequence[float]) -> tuple[float, float | None]:
    """(first forward s, mean further forward s or None) from the loop's start/end and marks."""
    if not marks:
        return end - start, None
    first = marks[0] - start
    if len(marks) < 2:
        return first, None
    return first, (marks[-1] - marks[0]) / (len(marks) - 1)


def after_step(runner: Any, *, tokens: int, execute_s: float, sample_s: float, propose_s: float) -> None:
    """Feed one finished runner step's timings to the chooser."""
    state = getattr(runner, "_specgate_step_k", None)
    if state is None or state["pending"] is None or state["chooser"] is None:
        return
    pending, state["pending"] = state["pending"], None
    if "end" not in pending:
        return
    first, further = draft_split(pending["start"], pending["end"], pending["marks"])
    state["chooser"].observe_step(tokens=tokens, verify_s=execute_s + sample_s - propose_s,
                                  first_draft_s=first, draft_s=further)


def worker_step_k(worker: Any, on: bool | None = None, cycle: list[int] | None = None,
                  reset: bool = False) -> dict[str, Any]:
    """`collective_rpc("specgate_step_k")`: switch per-step K, force a cycle of k, read state."""
    runner = worker.model_runner
    state = _state(runner)
    if on is not None:
        state["on"] = bool(on)
    if cycle is not None:
        state["cycle"], state["turn"] = (list(cycle) or None), 0
    step_k: StepK | None = state["chooser"]
    out: dict[str, Any] = {"on": state["on"], "cycle": state["cycle"], "applied": dict(state["applied"])}
    if reset:
        state["applied"] = {}
    if step_k is not None:
        costs = step_k.costs(1)
        out.update(shared_hazards=step_k.shared.hazards(), first_draft_s=step_k.first_draft.value,
                   draft_s=step_k.draft.value, verify_s_batch1=list(costs.target_s) if costs is not None else None)
    return out
