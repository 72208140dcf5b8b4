"""`specgate serve` flags and SPECGATE_* env vars → GatewaySettings; vLLM refused clearly."""

from __future__ import annotations

import pytest

from gateway.cli import build_parser
from gateway.cli.serve import settings_from_args


def test_defaults_are_the_embedded_qwen_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SPECGATE_MODEL", "SPECGATE_PORT", "SPECGATE_K"):
        monkeypatch.delenv(var, raising=False)
    s = settings_from_args(build_parser().parse_args(["serve"]))
    assert (s.model, s.draft_model, s.drafter, s.k, s.draft_mask, s.engine, s.port) == (
        "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "model", 4, True, "torch", 8000
    )
    assert s.api_key is None
    assert (s.adaptive_k, s.dtype) == (True, "auto")  # measured costs pick K; dtype from the CPU flags
    assert s.engine_config_kwargs()["adaptive_k"] is True


def test_adaptive_k_flag_and_vllm_keeps_a_fixed_k() -> None:
    off = settings_from_args(build_parser().parse_args(["serve", "--adaptive-k", "off"]))
    assert off.adaptive_k is False and off.engine_config_kwargs()["adaptive_k"] is False
    vllm = settings_from_args(build_parser().parse_args(["serve", "--engine", "vllm"]))
    assert vllm.engine_config_kwargs()["adaptive_k"] is False


def test_flags_override_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGATE_PORT", "9001")
    monkeypatch.setenv("SPECGATE_K", "6")
    args = build_parser().parse_args(
        ["serve", "--model", "/m/t", "--draft-model", "/m/d", "--drafter", "ngram", "-k", "2",
         "--draft-mask", "off", "--api-key", "sk-x", "--dtype", "float32", "--max-queue", "3"]
    )
    s = settings_from_args(args)
    assert (s.model, s.draft_model, s.drafter, s.k, s.draft_mask, s.dtype, s.max_queue) == (
        "/m/t", "/m/d", "ngram", 2, False, "float32", 3
    )
    assert s.port == 9001  # from the environment, no flag given
    assert s.api_key is not None and s.api_key.get_secret_value() == "sk-x"
    kwargs = s.engine_config_kwargs()
    assert kwargs["drafter"] == "ngram" and kwargs["draft_model"] is None and kwargs["k"] == 2


def test_invalid_setting_is_refused() -> None:
    with pytest.raises(Exception, match="k"):
        settings_from_args(build_parser().parse_args(["serve", "-k", "0"]))


def test_vllm_engine_is_refused_with_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    if importlib.util.find_spec("engine.vllm_engine") is not None:
        pytest.skip("this build has a vLLM engine")
    args = build_parser().parse_args(["serve", "--engine", "vllm"])
    assert args.func(args) == 2
    assert "not available in this build" in capsys.readouterr().err
