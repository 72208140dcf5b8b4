"""`grammar_compiler_for(config, tokenizer, ...)`: the one place an engine's grammar compiler is
built from its `EngineConfig`, for every backend.

It reads the JSON policy (`json_property_order`, `json_whitespace`), the compile time limit
(`grammar_compile_timeout_s`) and the disk cache (`grammar_disk_cache_mb`, under
`<models root>/.grammars`; 0 = off). What the engine alone knows (its logits width, its stop
ids, which grammar backend it can enforce) comes as arguments. Knows nothing of models or HTTP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.config import EngineConfig

if TYPE_CHECKING:
    from grammars import GrammarCompiler


def grammar_compiler_for(config: EngineConfig, tokenizer: Any, *, vocab_size: int, stop_token_ids: list[int],
                         backend: str | None = None) -> GrammarCompiler:
    """`backend` None: the config's `grammar_backend`."""
    from engine.models.cache import models_root
    from grammars import GrammarCompiler

    compiler = GrammarCompiler(
        tokenizer,
        backend=backend if backend is not None else config.grammar_backend,  # type: ignore[arg-type]
        property_order=config.json_property_order,
        json_whitespace=config.json_whitespace,
        vocab_size=vocab_size,
        stop_token_ids=stop_token_ids,
        compile_timeout_s=config.grammar_compile_timeout_s,
    )
    if config.grammar_disk_cache_mb:
        compiler.enable_disk_cache(models_root(config.cache_dir) / ".grammars",
                                   max_bytes=config.grammar_disk_cache_mb << 20)
    return compiler
