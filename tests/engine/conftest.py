"""Engine test fixtures: the tiny float32 model pair, a grammar compiler on the real Qwen
tokenizer, and a `SpecDecoder` factory."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import torch

QWEN_LOGITS = 151_936


@pytest.fixture(scope="session")
def tiny_pair(tiny_target_dir: pathlib.Path, tiny_draft_dir: pathlib.Path) -> tuple[Any, Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = AutoModelForCausalLM.from_pretrained(str(tiny_target_dir), dtype=torch.float32).eval()
    draft = AutoModelForCausalLM.from_pretrained(str(tiny_draft_dir), dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_target_dir))
    return target, draft, tokenizer


@pytest.fixture(scope="session")
def grammar_compiler(tiny_pair: tuple[Any, Any, Any]) -> Any:
    from engine.loader import model_stop_token_ids
    from grammars import GrammarCompiler

    target, _, tokenizer = tiny_pair
    return GrammarCompiler(tokenizer, vocab_size=QWEN_LOGITS, stop_token_ids=model_stop_token_ids(target, tokenizer))


@pytest.fixture(scope="session")
def compile_body(grammar_compiler: Any) -> Callable[[dict[str, Any]], Any]:
    """Compile the grammar of an OpenAI-style request body."""
    from grammars import spec_from_request

    def compile_(body: dict[str, Any]) -> Any:
        spec = spec_from_request(body)
        assert spec is not None
        return grammar_compiler.compile(spec)

    return compile_


@pytest.fixture(scope="session")
def make_decoder(tiny_pair: tuple[Any, Any, Any]) -> Callable[..., Any]:
    from engine.torch_engine.decoder import SpecDecoder

    target, draft, tokenizer = tiny_pair

    def make(**kwargs: Any) -> SpecDecoder:
        """A decoder on the tiny pair; `kwargs` are `EngineConfig` fields (model names are
        placeholders: the loaded tiny models are passed in), plus `costs` (measured forward costs)."""
        from engine.config import EngineConfig

        costs = kwargs.pop("costs", None)
        kwargs.setdefault("drafter", "model")
        kwargs.setdefault("adaptive_k", False)  # fixed K unless a test asks: tiny models' timings are noise
        use_draft = kwargs["drafter"] == "model"
        config = EngineConfig(model="tiny-target", draft_model="tiny-draft" if use_draft else None, **kwargs)
        return SpecDecoder(
            target_model=target, draft_model=draft if use_draft else None, tokenizer=tokenizer, config=config,
            costs=costs,
        )

    return make
