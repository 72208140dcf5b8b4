"""Load a causal LM and its tokenizer from a name or directory: the one switch point between
`engine.models` (registered names, pulling, GGUF conversion) and a plain local directory.

Knows nothing about caches or decoding. Models come back in eval mode on `device`.
"""

from __future__ import annotations

import pathlib
from typing import Any

import torch

_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {name!r}") from None


def resolve(name_or_path: str, *, cache_dir: str | None = None) -> pathlib.Path:
    """A local model directory for `name_or_path` (pulled on first use via engine.models)."""
    path = pathlib.Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    from engine.models import resolve_model

    return pathlib.Path(resolve_model(name_or_path, cache_dir=cache_dir))


def model_name(name_or_path: str) -> str:
    """The name a model is served under: a registered name as is, a directory by its basename."""
    path = pathlib.Path(name_or_path).expanduser()
    return path.name if path.is_dir() else name_or_path


def model_stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The stop ids (`grammars.stop_tokens` rule) with the EOS ids the model's configs name."""
    from grammars.stop_tokens import eos_ids_of, stop_token_ids

    configs = (getattr(model, "config", None), getattr(model, "generation_config", None))
    return stop_token_ids(tokenizer, config_eos=eos_ids_of(*configs))


def load(name_or_path: str, *, dtype: str, device: str, cache_dir: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) for a registered name or a local directory, via engine.models."""
    from engine.models import load_model

    path = resolve(name_or_path, cache_dir=cache_dir)
    torch_dtype(dtype)  # clear error for an unknown dtype name
    model, tokenizer = load_model(path, dtype=dtype, device=device)  # type: ignore[arg-type]
    model.eval()
    return model, tokenizer


def load_gguf(name_or_path: str, *, n_threads: int, n_ctx: int, cache_dir: str | None = None) -> tuple[Any, Any]:
    """(LlamaCppModel, tokenizer) for a registered name (its Q4_K_M GGUF, fetched once and
    kept) or a directory holding one `*.gguf` beside its HF config and tokenizer."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    from engine.models import gguf_for
    from engine.torch_engine.llama_cpp_model import LlamaCppModel

    path = resolve(name_or_path, cache_dir=cache_dir)
    gguf = gguf_for(name_or_path if not pathlib.Path(name_or_path).expanduser().is_dir() else path,
                    cache_dir=cache_dir)
    if gguf is None:
        raise ValueError(f"{name_or_path!r} has no single GGUF file for llama.cpp kernels")
    try:
        generation_config = GenerationConfig.from_pretrained(str(path))
    except OSError:
        generation_config = None
    model = LlamaCppModel(gguf, config=AutoConfig.from_pretrained(str(path)), generation_config=generation_config,
                          n_threads=n_threads, n_ctx=n_ctx)
    return model, AutoTokenizer.from_pretrained(str(path))


def check_compat(target_tokenizer: Any, draft_tokenizer: Any) -> None:
    """Raise if the draft tokenizer differs from the target's (engine.models decides how)."""
    from engine.models import check_tokenizer_compat

    check_tokenizer_compat(target_tokenizer, draft_tokenizer)
