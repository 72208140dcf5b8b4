"""`load_model(path)`: a local HF model directory -> (model in eval mode, tokenizer).

Loads with transformers' `dtype=` argument (5.x API). Knows nothing about the registry or
pulling: resolve a name first with `resolve_model`.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, Literal

DTypeName = Literal["bfloat16", "float32", "float16"]


def load_model(
    path: str | os.PathLike[str],
    *,
    dtype: DTypeName = "bfloat16",
    device: str = "cpu",
) -> tuple[Any, Any]:
    """Load `(model, tokenizer)` from `path`; the model is on `device`, in eval mode.

    Raises ValueError for an unknown dtype, FileNotFoundError for a missing directory.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtypes = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
    if dtype not in dtypes:
        raise ValueError(f"dtype must be one of {sorted(dtypes)}, got {dtype!r}")
    directory = pathlib.Path(path)
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(f"{directory} is not a model directory (no config.json)")
    model: Any = AutoModelForCausalLM.from_pretrained(str(directory), dtype=dtypes[dtype])
    model = model.to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    return model, tokenizer
