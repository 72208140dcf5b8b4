"""The draft's window of the prompt: what it keeps, and that the draft cache follows it."""

from __future__ import annotations

from typing import Any

import pytest

from engine.drafters.window import SINK, draft_prompt
from engine.types import GenerationRequest, SamplingOptions


def test_window_keeps_the_sinks_and_the_tail() -> None:
    prompt = list(range(100))
    assert draft_prompt(prompt, window=0) is None
    assert draft_prompt(prompt, window=100 - SINK) is None  # fits: the whole prompt
    view = draft_prompt(prompt, window=10)
    assert view == [*range(SINK), *range(90, 100)]
    assert draft_prompt(prompt, window=100 - SINK - 1) == [*range(SINK), *range(SINK + 1, 100)]


@pytest.mark.parametrize("window", [0, 3])
def test_draft_cache_holds_the_window_then_the_output(window: int, make_decoder: Any, tiny_pair: Any) -> None:
    tokenizer = tiny_pair[2]
    prompt = list(tokenizer.encode("Answer with three words about a calm blue sea at night, please."))
    decoder = make_decoder(drafter="model", k=3, draft_window=window)
    seq = decoder.new_sequence(GenerationRequest("w", prompt, SamplingOptions(temperature=0.0, max_tokens=12)))
    try:
        while not seq.finished and len(seq.output_ids) < 6:
            decoder.step(seq)
        assert seq.draft_kv is not None and seq.stats.draft_forwards > 0
        seen = [*prompt[:SINK], *prompt[-window:]] if window else prompt
        assert seq.draft_tokens == seen + seq.output_ids
        assert seq.draft_kv.tokens[: len(seen)] == seen  # the draft prefilled its window, not the prompt
        assert len(seq.draft_kv.tokens) <= len(seq.draft_tokens)
    finally:
        seq.free()
