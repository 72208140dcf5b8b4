"""`build_engine(config)`: load target (and draft) model + tokenizer, build the grammar
compiler once (vocab_size = the model's logits width, stop ids from the model config), and
return a `TorchEngine`. The only place that wires config to parts."""

from __future__ import annotations

import pathlib

from engine import loader
from engine.decoder import SpecDecoder, stop_token_ids
from engine.torch_engine import TorchEngine
from engine.types import EngineConfig


def build_engine(config: EngineConfig) -> TorchEngine:
    from grammars import GrammarCompiler

    target, tokenizer = loader.load(config.model, dtype=config.dtype, device=config.device, cache_dir=config.cache_dir)
    draft = None
    if config.drafter == "model":
        assert config.draft_model is not None
        draft, draft_tokenizer = loader.load(
            config.draft_model, dtype=config.dtype, device=config.device, cache_dir=config.cache_dir
        )
        loader.check_compat(tokenizer, draft_tokenizer)
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
    )
    compiler = GrammarCompiler(
        tokenizer,
        backend=config.grammar_backend,  # type: ignore[arg-type]
        vocab_size=decoder.logits_width,
        stop_token_ids=sorted(stop_token_ids(target, tokenizer)),
    )
    name = config.model if not pathlib.Path(config.model).is_dir() else pathlib.Path(config.model).name
    return TorchEngine(decoder=decoder, config=config, model_name=name, grammar_compiler=compiler)
