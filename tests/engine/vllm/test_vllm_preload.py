"""vLLM on CPU: tcmalloc and Intel OpenMP are found where bootstrap / Debian put them and
prepended to LD_PRELOAD once, and the startup notes say which were found (no vLLM needed)."""

from __future__ import annotations

import pathlib

import pytest

from engine.vllm.engine import _configure_env, find_preload_libraries, preload_for_vllm


def _touch(path: pathlib.Path) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_finds_iomp_in_the_environment_and_tcmalloc_in_system_dirs(tmp_path: pathlib.Path) -> None:
    iomp = _touch(tmp_path / "venv" / "lib" / "libiomp5.so")
    tc = _touch(tmp_path / "usr" / "lib" / "libtcmalloc_minimal.so.4")
    found = find_preload_libraries(prefixes=(str(tmp_path / "venv"),), lib_dirs=(str(tc.parent),))
    assert found == {"tcmalloc": str(tc), "iomp5": str(iomp)}
    assert find_preload_libraries(prefixes=(str(tmp_path / "none"),), lib_dirs=(str(tmp_path / "none"),)) == {
        "tcmalloc": None, "iomp5": None}


def test_prepends_once_and_reports(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_PRELOAD", "/opt/other.so")
    found = {"tcmalloc": "/x/libtcmalloc_minimal.so.4", "iomp5": None}
    notes = preload_for_vllm(found)
    import os

    assert os.environ["LD_PRELOAD"] == "/x/libtcmalloc_minimal.so.4:/opt/other.so"
    preload_for_vllm(found)  # idempotent
    assert os.environ["LD_PRELOAD"] == "/x/libtcmalloc_minimal.so.4:/opt/other.so"
    assert notes[0].endswith("/x/libtcmalloc_minimal.so.4")
    assert "not found" in notes[1] and "intel-openmp" in notes[1]


def test_preload_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.setenv("SPECGATE_VLLM_PRELOAD", "0")
    for var in ("SPECGATE_VLLM_MODE", "SPECGATE_VLLM_DRAFT_MASK", "VLLM_CPU_OMP_THREADS_BIND",
                "VLLM_USE_V2_MODEL_RUNNER"):
        monkeypatch.setenv(var, "")  # recorded, so what _configure_env sets is undone afterwards
        monkeypatch.delenv(var)
    notes = _configure_env(plugin_mode="full", draft_mask=True, device="cpu")
    import os

    assert "LD_PRELOAD" not in os.environ and "off" in notes[0]
