"""`resolve_model(name_or_path)`: a name or path -> a local HF model directory.

Order: (1) a registered name -> its cache directory, pulled on first use (`pull=True`);
(2) an existing local directory with a `config.json` -> as is; (3) anything else is taken
as a hub id and fetched with `huggingface_hub.snapshot_download`, unless `HF_HUB_OFFLINE`
is set, in which case the error lists the registered names. A path-looking argument that
does not exist is an error, never a hub lookup. This module loads no weights.
"""

from __future__ import annotations

import os
import pathlib

from engine.models.cache import model_dir, read_manifest
from engine.models.errors import ModelNotFoundError, ModelNotPulledError
from engine.models.pulling import pull as pull_model
from engine.models.registry import REGISTRY, registered_names

_TRUTHY = {"1", "true", "yes", "on"}


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUTHY


def _looks_like_path(text: str) -> bool:
    return text.startswith(("/", ".", "~")) or text.count("/") > 1  # hub ids are "org/name"


def resolve_model(
    name_or_path: str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    pull: bool = True,
    progress: bool = True,
) -> pathlib.Path:
    """The local directory holding `name_or_path` (see module docstring for the order).

    Raises ModelNotPulledError (registered, not cached, `pull=False`), ModelNotFoundError
    (no such directory / unknown name offline / not on the hub), PullError (pull failed).
    """
    text = os.fspath(name_or_path)
    names = ", ".join(registered_names())
    if text in REGISTRY:
        directory = model_dir(text, cache_dir=cache_dir)
        if read_manifest(directory) is not None:
            return directory
        if not pull:
            raise ModelNotPulledError(
                f"registered model {text!r} is not pulled into {directory.parent}; run "
                f"`specgate models pull {text}` (or resolve with pull=True)"
            )
        return pull_model(text, cache_dir=cache_dir, progress=progress)
    path = pathlib.Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{path} is a directory but holds no config.json (not a model)")
        return path
    if path.exists() or _looks_like_path(text):
        raise ModelNotFoundError(
            f"{text!r} is not a model directory; registered names: {names}"
        )
    if _hub_offline():
        raise ModelNotFoundError(
            f"{text!r} is neither a registered model nor a local directory, and HF_HUB_OFFLINE "
            f"is set (no hub); registered names: {names}"
        )
    from huggingface_hub import snapshot_download

    try:
        return pathlib.Path(snapshot_download(repo_id=text))
    except Exception as exc:
        raise ModelNotFoundError(
            f"{text!r}: not registered, not a local directory, and the hub download failed "
            f"({exc}); registered names: {names}"
        ) from exc
