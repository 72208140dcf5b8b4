"""Gateway configuration: one pydantic-settings object read from `SPECGATE_*` environment
variables, overridable by `specgate serve` flags (generated from these fields by
`cli.flags`: one flag per field, the field's description as its help).

The engine's fields are not range-checked here: `engine_config()` builds the one typed
`engine.EngineConfig`, which checks them, and a validator calls it so a bad value fails when
the settings are read. Gateway-only limits are checked here. Knows nothing about HTTP or how
an engine is built.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine import EngineConfig, VllmOptions
from engine.config import (
    Backend,
    DrafterName,
    DraftSample,
    GrammarBackend,
    JsonPropertyOrder,
    JsonWhitespace,
    Kernels,
    PluginMode,
)

# Settings that describe the engine (also the flags `specgate generate` takes).
ENGINE_FIELDS = (
    "model", "draft_model", "engine", "drafter", "k", "span_tokens", "history_tokens", "draft_window", "adaptive_k", "remeasure_costs", "draft_mask", "dtype", "kernels", "draft_kernels", "device",
    "max_model_len", "grammar_backend", "json_property_order", "json_whitespace", "max_concurrent_requests", "max_spec_concurrency", "max_queue",
    "vllm_tensor_parallel_size", "vllm_gpu_memory_utilization", "vllm_kv_cache_gib", "vllm_enforce_eager",
    "vllm_plugin_mode", "vllm_draft_sample", "vllm_step_k", "prefix_cache_mib",
)


class GatewaySettings(BaseSettings):
    """All gateway settings; env var = `SPECGATE_` + upper-case field name."""

    model_config = SettingsConfigDict(env_prefix="SPECGATE_", extra="ignore")

    # Engine (checked by engine.EngineConfig)
    model: str = Field("qwen2.5-coder-1.5b", description="target model: a registered name or a local HF model directory")
    draft_model: str | None = Field("qwen2.5-coder-0.5b", description="draft model (used by --drafter model)")
    engine: Backend = Field("torch", description="engine backend")
    drafter: DrafterName = Field(
        "model", description="draft source: draft model, prompt lookup, grammar-forced tokens only, or no speculation")
    k: int = Field(4, description="draft tokens per step, 0..16 (with adaptive K: the largest K)")
    span_tokens: int = Field(
        8, description="grammar-forced tokens a step's draft chain may add beyond K, 0..16 (no draft forward; "
        "torch engine; with adaptive K the measured verify costs decide how many pay)")
    history_tokens: int = Field(
        65536, description="bound of the history index: recent outputs per caller and exact grammar whose "
        "continuations are drafted before the draft model's (torch engine, masked draft model); 0 = off")
    draft_window: int = Field(
        64, ge=0, description="the draft model reads only the first 4 and the last N prompt tokens: a short draft "
        "prefill on long prompts; the output law is unchanged, acceptance may fall (torch engine); 0 = the whole prompt")
    adaptive_k: bool | None = Field(
        None, description="pick K <= k per step from measured forward costs and acceptance (default: on for torch, off for vLLM)")
    remeasure_costs: bool = Field(False, description="re-measure the cached forward costs at start")
    draft_mask: bool = Field(True, description="apply the grammar mask to the draft too")
    dtype: str = Field("auto", description="model dtype: auto (bfloat16 where the CPU has native bf16, else float32), bfloat16, float32, float16")
    kernels: Kernels = Field(
        "auto", description="CPU kernels of the torch engine: llama-cpp (the models' Q4_K_M GGUF weights on "
        "llama.cpp's kernels), torch (transformers in --dtype), auto (llama-cpp where the CPU has no native bf16)")
    draft_kernels: Kernels = Field(
        "auto", description="CPU kernels of the draft model (auto: llama-cpp wherever it can run the draft: "
        "one-token draft forwards are fastest there); the output law does not depend on the draft's kernels")
    device: str = Field("cpu", description="torch device")
    max_model_len: int = Field(4096, description="prompt + output tokens per request")
    grammar_backend: GrammarBackend = Field(
        "auto", description="grammar backend: auto (JSON schema: llguidance, else xgrammar), xgrammar, llguidance, outlines")
    json_property_order: JsonPropertyOrder = Field(
        "schema", description="listed JSON properties in schema order (OpenAI's and vLLM's "
        "order), or in any order (JSON Schema's; torch engine); additional properties may come "
        "anywhere either way (grammars.backends.llguidance.object_rules)")
    json_whitespace: JsonWhitespace = Field(
        "conventional", description="where constrained JSON may put whitespace: conventional (after "
        "{ [ , : and before } ], never before , or :; compact and indented JSON both fit) or flexible "
        "(between any two tokens); runs bounded either way (grammars.json.layout, docs/json-schema.md)")
    served_model_name: str | None = Field(None, description="the model id clients use (default: the model's name)")
    max_concurrent_requests: int = Field(8, description="requests decoding at once (more wait in the queue)")
    max_spec_concurrency: int | None = Field(
        None, description="above this many active requests, steps run without speculation (torch engine; "
        "default: speculate at any load)")
    max_queue: int = Field(64, description="requests waiting beyond max_concurrent_requests before 429")
    prefix_cache_mib: int = Field(
        1024, description="automatic prefix cache bound in MiB: reuse the target's and draft's keys/values of "
        "recent prompts' common prefixes, LRU beyond the bound; 0 = off (torch engine; vLLM has its own)")
    vllm_tensor_parallel_size: int = Field(1, description="vLLM: tensor parallel size")
    vllm_gpu_memory_utilization: float | None = Field(None, description="vLLM: GPU memory fraction")
    vllm_kv_cache_gib: float | None = Field(None, description="vLLM: KV cache GiB (CPU default 1)")
    vllm_enforce_eager: bool = Field(True, description="vLLM: no torch.compile / CUDA graphs")
    vllm_plugin_mode: PluginMode = Field(
        "full", description="vLLM: what the specgate plugin patches (full = draft mask + CPU kernel fix)")
    vllm_draft_sample: DraftSample = Field(
        "probabilistic", description="vLLM: how drafts are sampled")
    vllm_step_k: bool = Field(
        False, description="vLLM: choose each step's draft length (<= k) for the batch from the measured step "
        "costs and acceptance (engine.vllm.step_k); off = vLLM's fixed k")

    # HTTP
    host: str = Field("127.0.0.1", description="bind address")
    port: int = Field(8000, ge=0, le=65535, description="port")
    api_key: SecretStr | None = Field(None, description="require 'Authorization: Bearer <key>' on /v1 routes")
    metrics_access: Literal["public", "api_key", "off"] = Field(
        "public", description="/metrics: open, behind the API key, or not served (404)")
    health_access: Literal["public", "api_key", "off"] = Field(
        "public", description="/health: open, behind the API key, or not served (404)")
    cors_allow_origins: str = Field(
        "", description="comma-separated origins allowed by CORS ('*' for any); empty: CORS off")
    shutdown_timeout_s: float = Field(
        30.0, gt=0.0, description="on SIGTERM: seconds in-flight requests get to finish before they are failed")

    # Limits
    max_tokens_cap: int = Field(4096, ge=1, description="largest max_tokens a request may ask for")
    default_max_tokens: int = Field(512, ge=1, description="max_tokens when a request gives none")
    max_n: int = Field(8, ge=1, description="largest n (choices per request)")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="largest request body (413 beyond)")
    retry_after_s: int = Field(1, ge=1, description="Retry-After seconds on 429 (overloaded)")
    unavailable_retry_after_s: int = Field(
        5, ge=1, description="Retry-After seconds on 503 (engine starting, dead or shutting down)")
    max_messages: int = Field(1024, ge=1, description="most messages in one chat request")
    max_tools: int = Field(128, ge=0, description="most tools in one request")
    max_stop_sequences: int = Field(16, ge=0, description="most stop strings in one request")
    max_stop_chars: int = Field(512, ge=1, description="longest stop string, in characters")
    max_schema_bytes: int = Field(
        64 * 1024, ge=256, description="largest JSON schema / tool parameters / SQL schema, as compact JSON bytes")
    max_schema_depth: int = Field(
        64, ge=2, description="deepest nesting of objects and arrays inside one JSON schema")
    max_enum_size: int = Field(1024, ge=1, description="most values in one enum or choice list")
    max_grammar_bytes: int = Field(
        64 * 1024, ge=16, description="largest regex or grammar (Lark / EBNF) text, in UTF-8 bytes")
    grammar_compile_timeout_s: float = Field(
        60.0, gt=0.0, description="grammar compile time limit (compiles run off the event loop); "
        "the slowest of 1,050 real-world JSON schemas takes 11 s on a quiet 2-core CPU")
    grammar_disk_cache_mb: int = Field(
        256, ge=0, description="compiled grammars kept on disk across restarts, under the specgate "
        "cache dir (<models root>/.grammars); 0: off")

    gc_freeze: bool = Field(
        True, description="freeze the garbage collector's heap after startup and after a grammar "
        "family's first compile (gateway.gc_heap: full collections otherwise walk the tokenizer "
        "and vocabulary tables, 0.2-0.4 s pauses mid-generation)")

    # Observability
    stats_log_interval_s: float = Field(10.0, ge=0.0, description="seconds between speculation log lines (0: off)")
    log_level: str = Field("info", description="log level")

    @model_validator(mode="after")
    def _engine_config_is_valid(self) -> GatewaySettings:
        self.engine_config()  # ValueError → a ValidationError naming the problem
        return self

    def engine_config(self) -> EngineConfig:
        """The one typed engine configuration these settings describe."""
        return EngineConfig(
            model=self.model,
            draft_model=self.draft_model if self.drafter == "model" else None,
            backend=self.engine,
            drafter=self.drafter,
            k=self.k,
            adaptive_k=self.adaptive_k,
            remeasure_costs=self.remeasure_costs,
            draft_mask=self.draft_mask,
            dtype=self.dtype,
            kernels=self.kernels,
            draft_kernels=self.draft_kernels,
            device=self.device,
            max_model_len=self.max_model_len,
            max_num_seqs=self.max_concurrent_requests,
            max_spec_concurrency=self.max_spec_concurrency,
            max_queue=self.max_queue,
            grammar_backend=self.grammar_backend,
            json_property_order=self.json_property_order,
            json_whitespace=self.json_whitespace,
            grammar_compile_timeout_s=self.grammar_compile_timeout_s,
            grammar_disk_cache_mb=self.grammar_disk_cache_mb,
            prefix_cache_mib=self.prefix_cache_mib,
            span_tokens=self.span_tokens,
            history_tokens=self.history_tokens,
            draft_window=self.draft_window,
            vllm=VllmOptions(
                tensor_parallel_size=self.vllm_tensor_parallel_size,
                gpu_memory_utilization=self.vllm_gpu_memory_utilization,
                kv_cache_gib=self.vllm_kv_cache_gib,
                enforce_eager=self.vllm_enforce_eager,
                plugin_mode=self.vllm_plugin_mode,
                draft_sample=self.vllm_draft_sample,
                step_k=self.vllm_step_k,
            ),
        )
