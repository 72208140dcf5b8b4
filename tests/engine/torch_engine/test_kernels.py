"""`engine.torch_engine.kernels.choose_kernels`: auto picks llama.cpp only where it can run (CPU device, the
build present and usable on this CPU, a GGUF for every model), an explicit choice wins or
fails naming why; `engine.torch_engine.llama_cpp_model.available` refuses a CPU without the build's ISA."""

from __future__ import annotations

import pathlib

import pytest

from engine.config import EngineConfig
from engine.pacing.hardware import CpuInfo
from engine.torch_engine import kernels, llama_cpp_model


@pytest.fixture
def can_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llama_cpp_model, "available", lambda: (True, ""))


AVX2 = CpuInfo(model="AMD EPYC (Zen 3)", flags=frozenset({"avx2", "fma", "f16c"}), cores=2)
BF16 = CpuInfo(model="AMD EPYC (Zen 4)", flags=frozenset({"avx2", "fma", "f16c", "avx512f", "avx512_bf16"}), cores=2)
PAIR = ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"]


def test_auto_picks_llama_cpp_where_the_cpu_has_no_native_bf16(can_run: None) -> None:
    kind, why = kernels.choose_kernels("auto", device="cpu", models=PAIR, info=AVX2)
    assert kind == "llama-cpp" and "no native bf16" in why
    kind, why = kernels.choose_kernels("auto", device="cpu", models=PAIR, info=BF16)
    assert kind == "torch" and "native bf16" in why
    assert kernels.choose_kernels("llama-cpp", device="cpu", models=PAIR, info=BF16)[0] == "llama-cpp"


def test_auto_falls_back_to_torch_with_the_reason(can_run: None, tmp_path: pathlib.Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert kernels.choose_kernels("auto", device="cpu", models=[str(tmp_path)], info=AVX2) == (
        "torch", f"llama.cpp not usable: no GGUF for {tmp_path}")
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    assert kernels.choose_kernels("auto", device="cpu", models=[str(tmp_path)], info=AVX2)[0] == "llama-cpp"
    assert kernels.choose_kernels("auto", device="cuda:0", models=PAIR, info=AVX2) == (
        "torch", "llama.cpp not usable: device cuda:0 is not a CPU")
    monkeypatch.setattr(llama_cpp_model, "available", lambda: (False, "llama-cpp-python is not installed"))
    assert kernels.choose_kernels("auto", device="cpu", models=PAIR, info=AVX2)[0] == "torch"


def test_explicit_choice_wins_or_fails_naming_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llama_cpp_model, "available", lambda: (False, "this CPU lacks avx2"))
    assert kernels.choose_kernels("torch", device="cpu", models=["x"]) == ("torch", "set explicitly")
    with pytest.raises(ValueError, match="cannot run here: this CPU lacks avx2"):
        kernels.choose_kernels("llama-cpp", device="cpu", models=["qwen2.5-coder-1.5b"])


def test_available_checks_the_cpu_flags_before_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    import platform

    from engine.pacing import hardware

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(hardware, "cpu_info", lambda: CpuInfo(model="old", flags=frozenset({"avx", "sse4_2"}), cores=2))
    ok, why = llama_cpp_model.available()
    assert not ok and "avx2 fma f16c" in why
    monkeypatch.setattr(hardware, "cpu_info",
                        lambda: CpuInfo(model="zen3", flags=frozenset({"avx2", "fma", "f16c"}), cores=2))
    assert llama_cpp_model.available() == (True, "")


def test_config_refuses_llama_cpp_off_the_torch_cpu_engine() -> None:
    with pytest.raises(ValueError, match="llama-cpp"):
        EngineConfig(model="m", drafter="none", backend="vllm", kernels="llama-cpp")
    with pytest.raises(ValueError, match="kernels"):
        EngineConfig(model="m", drafter="none", kernels="fast")  # type: ignore[arg-type]
    assert EngineConfig(model="m", drafter="none").kernels == "auto"


def test_draft_kernels_auto_picks_llama_cpp_wherever_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llama_cpp_model, "available", lambda: (True, ""))
    assert kernels.choose_draft_kernels("auto", device="cpu", draft=PAIR[1])[0] == "llama-cpp"
    assert kernels.choose_draft_kernels("torch", device="cpu", draft=PAIR[1]) == ("torch", "set explicitly")
    assert kernels.choose_draft_kernels("auto", device="cuda:0", draft=PAIR[1])[0] == "torch"
    monkeypatch.setattr(llama_cpp_model, "available", lambda: (False, "llama-cpp-python is not installed"))
    assert kernels.choose_draft_kernels("auto", device="cpu", draft=PAIR[1]) == (
        "torch", "llama.cpp not usable: llama-cpp-python is not installed")
    with pytest.raises(ValueError, match="draft kernels 'llama-cpp' cannot run here"):
        kernels.choose_draft_kernels("llama-cpp", device="cpu", draft=PAIR[1])
