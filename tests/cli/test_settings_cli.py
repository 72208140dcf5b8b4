"""`specgate serve` flags (generated from GatewaySettings) and SPECGATE_* env vars →
GatewaySettings → one typed EngineConfig; bad values and a missing vLLM refused clearly."""

from __future__ import annotations

import pytest

from cli import build_parser
from cli.serve import settings_from_args
from gateway.settings import GatewaySettings


def test_defaults_are_the_embedded_qwen_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SPECGATE_MODEL", "SPECGATE_PORT", "SPECGATE_K"):
        monkeypatch.delenv(var, raising=False)
    s = settings_from_args(build_parser().parse_args(["serve"]))
    assert (s.model, s.draft_model, s.drafter, s.k, s.draft_mask, s.engine, s.port) == (
        "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "model", 4, True, "torch", 8000
    )
    assert s.api_key is None
    assert s.dtype == "auto"  # dtype from the CPU flags
    assert s.engine_config().uses_adaptive_k is True  # measured costs pick K by default (torch)


def test_adaptive_k_flag_and_vllm_keeps_a_fixed_k() -> None:
    off = settings_from_args(build_parser().parse_args(["serve", "--adaptive-k", "off"]))
    assert off.adaptive_k is False and off.engine_config().uses_adaptive_k is False
    vllm = settings_from_args(build_parser().parse_args(["serve", "--engine", "vllm"]))
    assert vllm.engine_config().uses_adaptive_k is False


def test_prefix_cache_on_by_default_and_off_with_zero() -> None:
    default = settings_from_args(build_parser().parse_args(["serve"]))
    assert default.engine_config().prefix_cache_mib > 0
    off = settings_from_args(build_parser().parse_args(["serve", "--prefix-cache-mib", "0"]))
    assert off.engine_config().prefix_cache_mib == 0


def test_flags_override_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGATE_PORT", "9001")
    monkeypatch.setenv("SPECGATE_K", "6")
    args = build_parser().parse_args(
        ["serve", "--model", "/m/t", "--draft-model", "/m/d", "--drafter", "ngram", "-k", "2",
         "--draft-mask", "off", "--api-key", "sk-x", "--dtype", "float32", "--max-queue", "3",
         "--stats-log-interval", "0"]
    )
    s = settings_from_args(args)
    assert (s.model, s.draft_model, s.drafter, s.k, s.draft_mask, s.dtype, s.max_queue) == (
        "/m/t", "/m/d", "ngram", 2, False, "float32", 3
    )
    assert s.port == 9001  # from the environment, no flag given
    assert s.stats_log_interval_s == 0.0
    assert s.api_key is not None and s.api_key.get_secret_value() == "sk-x"
    config = s.engine_config()
    assert (config.drafter, config.draft_model, config.k, config.draft_mask, config.max_queue) == (
        "ngram", None, 2, False, 3
    )


def test_every_setting_has_a_flag() -> None:
    help_text = build_parser()._subparsers._group_actions[0].choices["serve"].format_help()  # type: ignore[union-attr]
    missing = [name for name in GatewaySettings.model_fields if "--" + name.replace("_", "-") not in help_text]
    assert not missing, f"settings without a serve flag: {missing}"


@pytest.mark.parametrize(("argv", "named"), [
    (["-k", "17"], "k must be in 0..16"),
    (["--drafter", "model", "--draft-model", ""], "draft_model"),
    (["--max-concurrent-requests", "0"], "max_num_seqs"),
    (["--engine", "vllm", "--adaptive-k", "on"], "adaptive_k"),
    (["--port", "70000"], "port"),
    (["--prefix-cache-mib", "-1"], "prefix_cache_mib"),
])
def test_invalid_setting_is_refused_by_name(argv: list[str], named: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=named):
        settings_from_args(build_parser().parse_args(["serve", *argv]))


def test_bad_flag_value_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--draft-mask", "maybe"])
    assert "on|off" in capsys.readouterr().err


def test_load_switch_is_off_by_default_and_can_be_set() -> None:
    """max_concurrent_requests sets how many requests decode at once; by default speculation
    runs at any load (one request per forward), and --max-spec-concurrency sets a switch."""
    config = GatewaySettings().engine_config()
    assert config.max_num_seqs == 8 and config.max_spec_concurrency is None
    assert GatewaySettings(max_spec_concurrency=2).engine_config().max_spec_concurrency == 2


def test_vllm_engine_is_refused_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A build without vLLM (SPECGATE_SKIP_VLLM=1) answers `--engine vllm` with exit 2 and a
    message naming the fix, before loading anything."""
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real_find_spec(name, *a))
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: pytest.fail("serve started a server instead of refusing"))
    args = build_parser().parse_args(["serve", "--engine", "vllm"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "needs vLLM" in err and "--engine torch" in err


def test_json_property_order_reaches_the_engine_config_and_vllm_refuses_any(
        monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_from_args(build_parser().parse_args(["serve", "--json-property-order", "any"]))
    assert settings.engine_config().json_property_order == "any"
    monkeypatch.setenv("SPECGATE_JSON_PROPERTY_ORDER", "any")
    assert GatewaySettings().engine_config().json_property_order == "any"
    assert GatewaySettings(json_property_order="schema").engine_config().json_property_order == "schema"
    with pytest.raises(ValueError, match="json_property_order 'any' needs the torch engine"):
        GatewaySettings(engine="vllm").engine_config()


def test_json_whitespace_reaches_the_engine_config(monkeypatch: pytest.MonkeyPatch) -> None:
    assert GatewaySettings().engine_config().json_whitespace == "conventional"
    settings = settings_from_args(build_parser().parse_args(["serve", "--json-whitespace", "flexible"]))
    assert settings.engine_config().json_whitespace == "flexible"
    monkeypatch.setenv("SPECGATE_JSON_WHITESPACE", "flexible")
    assert GatewaySettings().engine_config().json_whitespace == "flexible"
    with pytest.raises(ValueError):
        GatewaySettings(json_whitespace="pretty")  # type: ignore[arg-type]
