"""Shared fixtures: paths to ../shared, the real tokenizers, and tiny seeded random models.

Tiny models are real HF Qwen2 models (2 layers, hidden 64) with the real Qwen2.5 vocabulary
(151,936 rows) and tokenizer, saved to a temporary directory: they load like a pulled model
and run in milliseconds on CPU. Two models built with the same seed are identical; a draft
"close to" a target is built by perturbing the target's weights (`noise`).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
from collections.abc import Callable

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# measured forward costs of tiny test models go to a throw-away directory, never the user's cache
os.environ.setdefault("SPECGATE_COSTS_DIR", tempfile.mkdtemp(prefix="specgate-costs-"))

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("SPECGATE_SHARED", ROOT.parent / "shared"))
DATA = SHARED / "data"
TOKENIZERS = SHARED / "tokenizers"
QWEN_TOKENIZER_DIR = TOKENIZERS / "qwen2.5"
SMOLLM_TOKENIZER_DIR = TOKENIZERS / "smollm2"
QWEN_MODEL_VOCAB = 151_936  # embedding rows of the Qwen2.5 models (tokenizer has fewer ids)


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
    return SHARED


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
    return DATA


@pytest.fixture(scope="session")
def qwen_tokenizer():  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(QWEN_TOKENIZER_DIR))


@pytest.fixture(scope="session")
def smollm_tokenizer():  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(SMOLLM_TOKENIZER_DIR))


def build_tiny_qwen(
    out_dir: pathlib.Path, *, seed: int = 0, noise: float = 0.0, base_seed: int | None = None
) -> pathlib.Path:
    """Save a tiny random Qwen2 model with the real Qwen2.5 tokenizer into `out_dir`.

    With `base_seed` set, the weights are those of `build_tiny_qwen(seed=base_seed)` plus
    Gaussian noise of std `noise` drawn from `seed`: a draft that agrees with its target often.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=QWEN_MODEL_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=151643,
        eos_token_id=151645,
        pad_token_id=151643,
    )
    torch.manual_seed(seed if base_seed is None else base_seed)
    model = Qwen2ForCausalLM(config)
    if base_seed is not None and noise > 0:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn(param.shape, generator=gen) * noise)
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(QWEN_TOKENIZER_DIR / name, out_dir / name)
    return out_dir


@pytest.fixture(scope="session")
def tiny_qwen_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[..., pathlib.Path]:
    """`factory(seed=0, noise=0.0, base_seed=None) -> model dir`, cached per arguments."""
    cache: dict[tuple[int, float, int | None], pathlib.Path] = {}

    def factory(*, seed: int = 0, noise: float = 0.0, base_seed: int | None = None) -> pathlib.Path:
        key = (seed, noise, base_seed)
        if key not in cache:
            out = tmp_path_factory.mktemp(f"tiny-qwen-s{seed}-n{noise}-b{base_seed}")
            cache[key] = build_tiny_qwen(out, seed=seed, noise=noise, base_seed=base_seed)
        return cache[key]

    return factory


@pytest.fixture(scope="session")
def tiny_target_dir(tiny_qwen_factory: Callable[..., pathlib.Path]) -> pathlib.Path:
    return tiny_qwen_factory(seed=0)


@pytest.fixture(scope="session")
def tiny_draft_dir(tiny_qwen_factory: Callable[..., pathlib.Path]) -> pathlib.Path:
    """A draft close to `tiny_target_dir` (same base weights plus small noise)."""
    return tiny_qwen_factory(seed=1, noise=0.02, base_seed=0)
