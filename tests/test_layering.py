"""Imports go one way: cli → {gateway, benchmarks} → engine → {grammars, sampler} → tokenmask;
grammars and sampler never import each other (they share only `tokenmask`, the bitmask
format), nothing below imports the floor above it, and nothing imports `cli` (the `specgate`
command, the one package that imports both the gateway and the benchmarks). Inside packages,
the subsystems listed in APART stay apart."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("cli", "gateway", "benchmarks", "engine", "grammars", "sampler", "tokenmask")
FORBIDDEN = {
    "tokenmask": {"sampler", "grammars", "engine", "gateway", "benchmarks", "cli"},
    "sampler": {"grammars", "engine", "gateway", "benchmarks", "cli"},
    "grammars": {"sampler", "engine", "gateway", "benchmarks", "cli"},
    "engine": {"gateway", "benchmarks", "cli"},
    "benchmarks": {"gateway", "cli"},
    "gateway": {"benchmarks", "cli"},
    "cli": set(),
}


def _imported_top_levels(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_go_one_way(package: str) -> None:
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imported_top_levels(path) & FORBIDDEN[package]
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offenders, "\n".join(offenders)


def test_every_package_is_typed() -> None:
    for package in PACKAGES:
        assert (ROOT / package / "py.typed").exists(), package


# Inside a package, subsystems that must stay apart: (folder, modules it never imports).
APART = (
    ("engine/torch_engine", ("engine.vllm",)),
    ("engine/vllm", ("engine.torch_engine",)),
    ("engine/pacing", ("engine.vllm", "engine.drafters")),
    ("grammars/backends/llguidance", ("grammars.backends.xgrammar", "grammars.backends.outlines", "grammars.sql")),
    ("grammars/backends/xgrammar", ("grammars.backends.llguidance", "grammars.backends.outlines", "grammars.sql.mask")),
    ("grammars/json", ("grammars.backends", "grammars.sql")),
    ("grammars/sql", ("grammars.backends", "grammars.json", "grammars.sql.mask")),
)


def _imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("folder,forbidden", APART, ids=[folder for folder, _ in APART])
def test_subsystems_stay_apart(folder: str, forbidden: tuple[str, ...]) -> None:
    """The language of SQL (grammars/sql) never reaches into its mask layer, either backend
    into the other, the torch engine into vLLM's (or back), the seam's types excepted."""
    offenders = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        if folder == "grammars/sql" and "mask" in path.relative_to(ROOT / folder).parts:
            continue  # grammars/sql/mask is the layer on top of the language
        for module in _imported_modules(path):
            if any(module == name or module.startswith(name + ".") for name in forbidden):
                offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not offenders, "\n".join(offenders)
