"""`specgate models list|pull` on a temporary cache: output, and errors for unknown names."""

from __future__ import annotations

import pathlib

import pytest

from cli import main


def test_list_on_empty_cache(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "list", "--cache-dir", str(tmp_path / "models")]) == 0
    out = capsys.readouterr().out
    assert f"models root: {tmp_path / 'models'}" in out
    for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"):
        line = next(line for line in out.splitlines() if line.startswith(name))
        assert "not pulled" in line and f"specgate models pull {name}" in line


def test_list_shows_pulled_and_local(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.models.cache import write_manifest

    for name in ("smollm2-135m", "my-finetune"):
        directory = tmp_path / name
        directory.mkdir()
        (directory / "model.safetensors").write_bytes(b"0" * 2048)
        write_manifest(directory, {"name": name})
    monkeypatch.setenv("SPECGATE_MODELS_DIR", str(tmp_path))  # env var, no flag
    assert main(["models", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    smol = next(line for line in lines if line.startswith("smollm2-135m"))
    assert "pulled" in smol and "KiB" in smol and str(tmp_path / "smollm2-135m") in smol
    assert any(line.startswith("my-finetune") and "local" in line for line in lines)


def test_pull_unknown_name_exits_2(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "pull", "gpt-17", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not registered: gpt-17" in err and "smollm2-135m" in err
    assert not any(tmp_path.iterdir())
