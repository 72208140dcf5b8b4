"""The bench's draft window (`specgate bench --draft-window`): TorchRunner builds every
draft-model configuration's decoder with the window it was given (the engine's default
when none), and `specgate-whole-prompt` with the whole prompt (0) whatever it was given."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from benchmarks.suite.torch_runner import TorchRunner
from engine.config import EngineConfig
from engine.loader import load


@pytest.fixture(scope="module")
def pair(tiny_target_dir: pathlib.Path, tiny_draft_dir: pathlib.Path) -> tuple[Any, Any, Any]:
    target, tokenizer = load(str(tiny_target_dir), dtype="float32", device="cpu")
    draft, _ = load(str(tiny_draft_dir), dtype="float32", device="cpu")
    return target, draft, tokenizer


@pytest.mark.parametrize("window", [None, 0, 16, 256])
def test_window_reaches_the_decoders(pair: tuple[Any, Any, Any], window: int | None) -> None:
    target, draft, tokenizer = pair
    runner = TorchRunner(target_model=target, draft_model=draft, tokenizer=tokenizer, draft_window=window)
    expected = EngineConfig.draft_window if window is None else window
    assert runner.decoder("specgate", 4).config.draft_window == expected
    assert runner.decoder("specgate-fixed-k", 4).config.draft_window == expected
    assert runner.decoder("specgate-whole-prompt", 4).config.draft_window == 0
