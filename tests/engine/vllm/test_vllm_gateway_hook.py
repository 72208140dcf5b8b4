"""The gateway's `--engine vllm` hook hands `build_vllm_engine` the EngineConfig fields plus
the `vllm_*` settings, and the engine module splits them back (no engine start)."""

from __future__ import annotations

from typing import Any

import pytest

from engine.vllm_engine import split_options
from gateway.app import build_engine_for
from gateway.settings import GatewaySettings


def test_settings_reach_build_vllm_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.vllm_engine as module

    seen: dict[str, Any] = {}
    monkeypatch.setattr(module, "build_vllm_engine", lambda kwargs: seen.update(kwargs) or "engine")
    settings = GatewaySettings(engine="vllm", k=3, drafter="ngram", vllm_kv_cache_gib=2.5,
                               vllm_tensor_parallel_size=2, vllm_enforce_eager=False, max_model_len=2048)
    assert build_engine_for(settings) == "engine"
    config, opts = split_options(seen)
    assert (config.k, config.drafter, config.max_model_len, config.draft_model) == (3, "ngram", 2048, None)
    assert opts == {"tensor_parallel_size": 2, "gpu_memory_utilization": None, "kv_cache_gib": 2.5,
                    "enforce_eager": False}


def test_split_options_refuses_what_vllm_cannot_do() -> None:
    with pytest.raises(ValueError, match="adaptive_k"):
        split_options({"model": "m", "drafter": "none", "adaptive_k": True})
    with pytest.raises(ValueError, match="plugin_mode"):
        split_options({"model": "m", "drafter": "none", "plugin_mode": "maybe"})
