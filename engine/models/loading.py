"""`load_model(path)`: a local HF model directory -> (model in eval mode, tokenizer).

Loads with transformers' `dtype=` argument (5.x API; `torch_dtype=` is the deprecated name). Knows nothing about the registry or
pulling: resolve a name first with `resolve_model`.
"""

from __future__ import annotations

import os
import pathlib
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

DTypeName = Literal["bfloat16", "float32", "float16"]


def load_model(
    path: str | os.PathLike[str],
    *,
    dtype: DTypeName | torch.dtype = "bfloat16",
    device: str = "cpu",
) -> tuple[Any, Any]:
    """Load `(model, tokenizer)` from `path`; the model is on `device`, in eval mode.

    `dtype` is a name ("bfloat16", "float32", "float16") or the torch dtype itself.
    Raises ValueError for an unknown dtype, FileNotFoundError for a missing directory.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtypes = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
    if isinstance(dtype, torch.dtype) and dtype in dtypes.values():
        torch_dtype = dtype
    elif isinstance(dtype, str) and dtype in dtypes:
        torch_dtype = dtypes[dtype]
    else:
        raise ValueError(f"dtype must be one of {sorted(dtypes)}, got {dtype!r}")
    directory = pathlib.Path(path)
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(f"{directory} is not a model directory (no config.json)")
    model: Any = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch_dtype)
    model = model.to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    return model, tokenizer
