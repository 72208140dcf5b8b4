"""Gateway configuration: one pydantic-settings object read from `SPECGATE_*` environment
variables, overridable by `specgate serve` flags.

Invariants: every limit is positive; `engine` is the name of an engine backend, which the
app factory resolves (it fails with a clear message when that backend is not in this build).
This module knows nothing about HTTP or how an engine is built; `engine_config_kwargs`
returns the keyword arguments for `engine.EngineConfig`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class GatewaySettings(BaseSettings):
    """All gateway settings; env var = `SPECGATE_` + upper-case field name."""

    model_config = SettingsConfigDict(env_prefix="SPECGATE_", extra="ignore")

    # Engine
    model: str = "qwen2.5-coder-1.5b"
    draft_model: str | None = "qwen2.5-coder-0.5b"
    drafter: Literal["model", "ngram", "forced", "none"] = "model"
    k: int = Field(default=4, ge=1, le=16)  # with adaptive_k: the largest K
    adaptive_k: bool = True  # torch engine: K per step from measured forward costs + acceptance
    remeasure_costs: bool = False  # re-measure the cached forward costs at start (SPECGATE_REMEASURE_COSTS=1)
    draft_mask: bool = True
    engine: Literal["torch", "vllm"] = "torch"
    dtype: str = "auto"  # torch engine: bfloat16 where the CPU has native bf16, else float32
    device: str = "cpu"
    max_model_len: int = Field(default=4096, ge=16)
    grammar_backend: str = "xgrammar"
    served_model_name: str | None = None
    # vLLM engine only (`engine="vllm"`): passed through to vLLM's engine arguments
    vllm_tensor_parallel_size: int = Field(default=1, ge=1)
    vllm_gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0)
    vllm_kv_cache_gib: float | None = Field(default=None, gt=0.0)  # CPU default: 1 GiB
    vllm_enforce_eager: bool = True

    # HTTP
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    api_key: SecretStr | None = None

    # Limits
    max_concurrent_requests: int = Field(default=8, ge=1)
    max_queue: int = Field(default=64, ge=0)
    max_tokens_cap: int = Field(default=4096, ge=1)
    default_max_tokens: int = Field(default=512, ge=1)
    max_n: int = Field(default=8, ge=1)
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    retry_after_s: int = Field(default=1, ge=1)

    # Observability
    stats_log_interval_s: float = Field(default=10.0, ge=0.0)  # 0 disables the periodic line
    log_level: str = "info"

    def engine_config_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `engine.EngineConfig` (no `engine` backend field)."""
        return {
            "model": self.model,
            "draft_model": self.draft_model if self.drafter == "model" else None,
            "drafter": self.drafter,
            "k": self.k,
            "adaptive_k": self.adaptive_k and self.engine == "torch",  # vLLM keeps its fixed K
            **({"remeasure_costs": True} if self.remeasure_costs else {}),
            "draft_mask": self.draft_mask,
            "dtype": self.dtype,
            "device": self.device,
            "max_spec_concurrency": self.max_concurrent_requests,
            "max_num_seqs": self.max_concurrent_requests,
            "max_queue": self.max_queue,
            "max_model_len": self.max_model_len,
            "grammar_backend": self.grammar_backend,
        }

    def vllm_engine_kwargs(self) -> dict[str, Any]:
        """The vLLM engine's extra options (`engine.vllm_engine.build_vllm_engine`)."""
        return {
            "tensor_parallel_size": self.vllm_tensor_parallel_size,
            "gpu_memory_utilization": self.vllm_gpu_memory_utilization,
            "kv_cache_gib": self.vllm_kv_cache_gib,
            "enforce_eager": self.vllm_enforce_eager,
        }
