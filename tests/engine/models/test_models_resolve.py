"""resolve_model: registered names, local directories, hub ids offline; load_model options."""

from __future__ import annotations

import pathlib

import pytest

from engine.models import ModelNotFoundError, ModelNotPulledError, load_model, resolve_model


def test_local_directory_is_returned_as_is(tmp_path: pathlib.Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(tmp_path) == tmp_path
    assert resolve_model(str(tmp_path), cache_dir=tmp_path / "unused") == tmp_path


def test_directory_without_config_is_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ModelNotFoundError, match="holds no config.json"):
        resolve_model(tmp_path)


def test_missing_path_is_not_sent_to_a_hub(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ModelNotFoundError, match="not a model directory; registered names"):
        resolve_model(tmp_path / "nope")


def test_registered_but_not_pulled_without_pull(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ModelNotPulledError, match="specgate models pull qwen2.5-coder-1.5b"):
        resolve_model("qwen2.5-coder-1.5b", cache_dir=tmp_path, pull=False)
    assert not (tmp_path / "qwen2.5-coder-1.5b").exists()


def test_directory_without_manifest_does_not_count_as_pulled(tmp_path: pathlib.Path) -> None:
    half = tmp_path / "smollm2-135m"
    half.mkdir()
    (half / "config.json").write_text("{}")
    with pytest.raises(ModelNotPulledError):
        resolve_model("smollm2-135m", cache_dir=tmp_path, pull=False)


def test_unknown_name_offline_lists_registered_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("Qwen/Qwen2.5-7B-Instruct", cache_dir=tmp_path)
    message = str(info.value)
    assert "HF_HUB_OFFLINE" in message
    for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"):
        assert name in message


def test_load_model_tiny(tiny_target_dir: pathlib.Path) -> None:
    import torch

    model, tokenizer = load_model(resolve_model(tiny_target_dir), dtype="float32")
    assert not model.training
    assert next(model.parameters()).dtype == torch.float32
    assert tokenizer.eos_token == "<|im_end|>"
    model_bf16, _ = load_model(tiny_target_dir)
    assert next(model_bf16.parameters()).dtype == torch.bfloat16
    model_half, _ = load_model(tiny_target_dir, dtype=torch.float16)  # a torch dtype works too
    assert next(model_half.parameters()).dtype == torch.float16


def test_load_model_bad_arguments(tmp_path: pathlib.Path, tiny_target_dir: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_model(tiny_target_dir, dtype="int3")  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model(tmp_path)
