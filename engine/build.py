"""`build_engine(config)`: load target (and draft) model + tokenizer, build the grammar
compiler once (vocab_size = the model's logits width, stop ids from the model config), and
return a `TorchEngine`. The only place that wires config to parts. `dtype="auto"` resolves
through `engine.hardware.choose_dtype`; a speculating engine gets its forward costs from
`engine.cost_model.load_or_measure` (cached) and exposes them as `engine.forward_costs`,
with human-readable `engine.startup_notes` for the gateway to log."""

from __future__ import annotations

import pathlib

from engine import cost_model, loader
from engine.decoder import SpecDecoder, stop_token_ids
from engine.hardware import choose_dtype
from engine.torch_engine import TorchEngine
from engine.types import EngineConfig


def build_engine(config: EngineConfig) -> TorchEngine:
    from grammars import GrammarCompiler

    dtype, dtype_reason = choose_dtype(config.dtype, device=config.device)
    target, tokenizer = loader.load(config.model, dtype=dtype, device=config.device, cache_dir=config.cache_dir)
    draft = None
    if config.drafter == "model":
        assert config.draft_model is not None
        draft, draft_tokenizer = loader.load(
            config.draft_model, dtype=dtype, device=config.device, cache_dir=config.cache_dir
        )
        loader.check_compat(tokenizer, draft_tokenizer)
    costs = None
    if config.drafter != "none" and config.k > 0:
        costs = cost_model.load_or_measure(
            target, draft, k_max=config.k, device=config.device, target_name=config.model,
            draft_name=config.draft_model if draft is not None else None, cache_dir=config.cache_dir,
            refresh=config.remeasure_costs,
        )
    decoder = SpecDecoder(
        target_model=target,
        draft_model=draft,
        tokenizer=tokenizer,
        drafter=config.drafter,
        k=config.k,
        adaptive_k=config.adaptive_k,
        draft_mask=config.draft_mask,
        unmasked_mode=config.unmasked_mode,
        max_model_len=config.max_model_len,
        device=config.device,
        ngram_max=config.ngram_max,
        ngram_min=config.ngram_min,
        costs=costs,
    )
    compiler = GrammarCompiler(
        tokenizer,
        backend=config.grammar_backend,  # type: ignore[arg-type]
        vocab_size=decoder.logits_width,
        stop_token_ids=sorted(stop_token_ids(target, tokenizer)),
    )
    name = config.model if not pathlib.Path(config.model).is_dir() else pathlib.Path(config.model).name
    engine = TorchEngine(decoder=decoder, config=config, model_name=name, grammar_compiler=compiler)
    engine.dtype = dtype
    engine.startup_notes = [f"dtype {dtype} ({dtype_reason})", *(costs.describe() if costs is not None else [])]
    if costs is not None and config.adaptive_k:
        engine.startup_notes.append(
            f"adaptive K on: K <= {config.k} per step from these costs and each request's acceptance")
    return engine
