"""`EngineConfig`: the one typed description of an engine, whichever backend runs it.

The gateway's settings produce exactly one `EngineConfig` (`GatewaySettings.engine_config()`),
`engine.build_engine(config)` dispatches on `backend`, and every range is checked here and
nowhere else (the settings call this constructor when they validate). Pure data: no torch,
no models, no HTTP.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

Backend = Literal["torch", "vllm"]
DrafterName = Literal["model", "ngram", "forced", "none"]
UnmaskedMode = Literal["argmax", "sample"]
PluginMode = Literal["full", "kernel-fix", "off"]
DraftSample = Literal["probabilistic", "greedy"]
GrammarBackend = Literal["auto", "xgrammar", "llguidance", "outlines"]
Kernels = Literal["auto", "torch", "llama-cpp"]
JsonPropertyOrder = Literal["schema", "any"]  # grammars.backends.llguidance.object_rules
JsonWhitespace = Literal["conventional", "flexible"]  # grammars.json.layout

K_MAX = 16
HISTORY_TOKENS_MAX = 1 << 22


def _check_choice(name: str, value: object, choice_type: Any) -> None:
    """`value` must be one of the `Literal` type's values (the choices are spelled once, there)."""
    choices = get_args(choice_type)
    if value not in choices:
        raise ValueError(f"{name} must be one of {'|'.join(choices)}, got {value!r}")


@dataclass(frozen=True)
class VllmOptions:
    """Options only the vLLM backend reads (`backend="vllm"`).

    `kv_cache_gib`: KV-cache size (on CPU this replaces vLLM's "fraction of all RAM" default;
    None = 1 GiB on CPU, vLLM's default elsewhere). `enforce_eager`: no torch.compile (a 40 s
    engine start on CPU instead of 3+ min). `plugin_mode`: what the specgate vLLM plugin
    patches (`engine.vllm.plugin`). `draft_sample`: how vLLM samples drafts. `step_k`: the
    plugin chooses each step's draft length (<= k) for the batch (`engine.vllm.step_k`; env
    SPECGATE_VLLM_STEP_K in vLLM's processes; off by default: measured to help where drafts
    are unmasked, not on the masked grammar workloads); off = vLLM's fixed k.
    `engine_args`: any further `AsyncEngineArgs` fields, passed through last.
    """

    tensor_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    kv_cache_gib: float | None = None
    enforce_eager: bool = True
    plugin_mode: PluginMode = "full"
    draft_sample: DraftSample = "probabilistic"
    step_k: bool = False
    engine_args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        if self.gpu_memory_utilization is not None and not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.kv_cache_gib is not None and self.kv_cache_gib <= 0:
            raise ValueError(f"kv_cache_gib must be > 0, got {self.kv_cache_gib}")
        _check_choice("plugin_mode", self.plugin_mode, PluginMode)
        _check_choice("draft_sample", self.draft_sample, DraftSample)


@dataclass(frozen=True)
class EngineConfig:
    """How to build an engine.

    `drafter`: "model" (draft model, `draft_model` required), "ngram" (prompt lookup),
    "forced" (grammar-forced tokens only) or "none" (no speculation). Every drafter except
    "none" also proposes grammar-forced tokens for free; a request's `prediction` text, when
    given, drives the drafts ahead of the configured drafter. `k`: draft tokens per step,
    0..16 (0 = no speculation). `span_tokens` (torch engine): grammar-forced tokens a step's
    draft chain may add beyond K (a forced text's canonical tokens, `engine.drafters.span`:
    no draft forward, q one-hot, exact), 0..16, 0 = one-token forced rows only; with adaptive
    K the measured verify costs and the forced tokens' acceptance decide how many pay.
    `history_tokens` (torch engine, masked draft model): the bound of the history index
    (`engine.drafters.history`: recent outputs per tenant and exact grammar, whose
    continuations are drafted before the draft model's; q one-hot, exact); 0 = off.
    `draft_window` (torch engine, draft model): the draft reads only the first few and the
    last `draft_window` prompt tokens (`engine.drafters.window`: its prompt prefill stays
    short; q changes, the output law does not); 0 = the whole prompt.

    `draft_mask=False` drafts from the raw draft logits (what other engines do), with
    `unmasked_mode` "argmax" (vLLM's default) or "sample"; verification stays exact. A
    request may override `draft_mask` (`GenerationRequest.draft_mask`).
    `max_num_seqs`: requests decoding at once; more wait in a queue of at most `max_queue`.
    `max_spec_concurrency`: with more active requests than this, steps run without
    speculation (the load switch; torch backend); None (the default) speculates at any load:
    the torch engine steps one request per forward, so a speculative step spends no compute
    another request could use (measured at 8 in flight: speculation 4.87x no-spec's
    throughput, the switch at 4 gave 1.01x).
    `adaptive_k` (None = on for the torch backend, off for vLLM): the engine measures its
    forward costs at start (`engine.pacing.cost_model`, cached per machine, models, dtype and kernels;
    `remeasure_costs` forces a new measurement) and picks K <= k per step from them and the
    request's acceptance, 0 where speculation cannot pay. `dtype` "auto": bfloat16 on CUDA and
    on CPUs with native bf16, float32 elsewhere (`engine.pacing.hardware.choose_dtype`).
    `kernels` (torch engine on CPU): "torch" runs the HF models in `dtype`; "llama-cpp" runs
    the same models' Q4_K_M GGUF weights on llama.cpp's CPU kernels (`engine.torch_engine.llama_cpp_model`;
    `dtype` unused); "auto" picks llama-cpp where the CPU has no native bf16
    (`engine.torch_engine.kernels.choose_kernels`). `draft_kernels` the same for the draft model ("auto":
    llama-cpp wherever it can run the draft, `engine.torch_engine.kernels.choose_draft_kernels`); a draft on
    other kernels than the target keeps the output law exact (q may be any distribution), it
    only changes acceptance and cost.
    `grammar_compile_timeout_s`: a grammar compile's time limit; `grammar_disk_cache_mb`:
    compiled grammars kept on disk across restarts under `<models root>/.grammars` (0 = off;
    `engine.grammar_compiler`).
    `prefix_cache_mib`: bound of the automatic prefix cache (`engine.torch_engine.prefix_cache`: the
    keys/values of recent prompts of the target and the draft, reused by later requests that
    start with the same tokens; LRU beyond the bound); 0 = off. Torch backend only (vLLM has
    its own prefix caching).
    """

    model: str
    draft_model: str | None = None
    backend: Backend = "torch"
    drafter: DrafterName = "model"
    k: int = 4
    span_tokens: int = 8
    history_tokens: int = 65536
    draft_window: int = 64
    adaptive_k: bool | None = None
    draft_mask: bool = True
    unmasked_mode: UnmaskedMode = "argmax"
    dtype: str = "auto"
    kernels: Kernels = "auto"
    draft_kernels: Kernels = "auto"
    device: str = "cpu"
    max_model_len: int = 4096
    max_num_seqs: int = 8
    max_spec_concurrency: int | None = None
    max_queue: int = 64
    grammar_backend: GrammarBackend = "auto"  # JSON schema: llguidance, else xgrammar (grammars.backends)
    json_property_order: JsonPropertyOrder = "schema"  # or "any" (grammars.backends.llguidance.object_rules; torch engine)
    json_whitespace: JsonWhitespace = "conventional"  # or "flexible" (grammars.json.layout)
    grammar_compile_timeout_s: float = 60.0
    grammar_disk_cache_mb: int = 0
    ngram_max: int = 3
    ngram_min: int = 1
    num_threads: int | None = None
    cache_dir: str | None = None
    remeasure_costs: bool = False
    prefix_cache_mib: int = 1024
    vllm: VllmOptions = field(default_factory=VllmOptions)

    def __post_init__(self) -> None:
        _check_choice("backend", self.backend, Backend)
        _check_choice("drafter", self.drafter, DrafterName)
        _check_choice("unmasked_mode", self.unmasked_mode, UnmaskedMode)
        _check_choice("kernels", self.kernels, Kernels)
        _check_choice("draft_kernels", self.draft_kernels, Kernels)
        if "llama-cpp" in (self.kernels, self.draft_kernels) and (
                self.backend != "torch" or not self.device.startswith("cpu")):
            raise ValueError("kernels 'llama-cpp' runs on the torch engine's CPU device only")
        _check_choice("grammar_backend", self.grammar_backend, GrammarBackend)
        _check_choice("json_property_order", self.json_property_order, JsonPropertyOrder)
        _check_choice("json_whitespace", self.json_whitespace, JsonWhitespace)
        if self.json_property_order == "any" and self.backend == "vllm":
            raise ValueError("json_property_order 'any' needs the torch engine: the vLLM engine's "
                             "xgrammar grammars write listed properties in schema order")
        if self.grammar_compile_timeout_s <= 0 or self.grammar_disk_cache_mb < 0:
            raise ValueError("grammar_compile_timeout_s must be > 0 and grammar_disk_cache_mb >= 0")
        if not 0 <= self.k <= K_MAX:
            raise ValueError(f"k must be in 0..{K_MAX}, got {self.k}")
        if self.draft_window < 0:
            raise ValueError(f"draft_window must be >= 0, got {self.draft_window}")
        if not 0 <= self.history_tokens <= HISTORY_TOKENS_MAX:
            raise ValueError(f"history_tokens must be in 0..{HISTORY_TOKENS_MAX}, got {self.history_tokens}")
        if not 0 <= self.span_tokens <= K_MAX:
            raise ValueError(f"span_tokens must be in 0..{K_MAX}, got {self.span_tokens}")
        if self.drafter == "model" and not self.draft_model:
            raise ValueError("drafter 'model' needs draft_model")
        if self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2 (a prompt token and an output token), got {self.max_model_len}")
        if self.max_num_seqs < 1 or self.max_queue < 0 or (self.max_spec_concurrency or 0) < 0:
            raise ValueError("max_num_seqs must be >= 1, max_queue and max_spec_concurrency >= 0")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(f"ngram sizes need 1 <= ngram_min <= ngram_max, got {self.ngram_min}, {self.ngram_max}")
        if self.prefix_cache_mib < 0:
            raise ValueError(f"prefix_cache_mib must be >= 0 (0 = off), got {self.prefix_cache_mib}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {self.num_threads}")
        if self.backend == "vllm" and self.adaptive_k:
            raise ValueError("adaptive_k is not available on the vLLM backend")
        if self.dtype not in ("auto", "bfloat16", "float32", "float16"):
            raise ValueError(f"dtype must be auto|bfloat16|float32|float16, got {self.dtype!r}")
        if self.backend == "vllm" and self.drafter == "forced":
            raise ValueError("drafter 'forced' is not available on the vLLM backend")

    @property
    def uses_adaptive_k(self) -> bool:
        """Adaptive K is on: explicitly, or by default on the torch backend."""
        return self.adaptive_k if self.adaptive_k is not None else self.backend == "torch"

    @property
    def speculative(self) -> bool:
        return self.drafter != "none" and self.k > 0

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
