"""PluginTimes: per-phase sums, step buckets keyed by scheduled tokens and draft path, the
plugin's share, and the merge of several workers' dicts."""

from __future__ import annotations

import pytest

from engine.vllm.timing import PHASES, PluginTimes, merge


def test_share_buckets_and_merge() -> None:
    t = PluginTimes()
    t.step(5, masked=True, execute_s=0.3, sample_s=0.1, propose_s=0.08)
    t.step(5, masked=True, execute_s=0.1, sample_s=0.1, propose_s=0.06)
    t.step(3, masked=False, execute_s=0.2, sample_s=0.2, propose_s=0.1)
    t.add("fill", 0.01)
    t.add("sync", 0.002)
    d = t.as_dict()
    assert d["steps"] == 3 and d["step_s"] == pytest.approx(1.0)
    assert d["plugin_s"] == pytest.approx(0.012) and d["share"] == pytest.approx(0.012)
    assert list(d["by_tokens"]) == ["3", "5m"]
    assert d["by_tokens"]["5m"] == {"steps": 2, "execute_s": pytest.approx(0.4), "sample_s": pytest.approx(0.2),
                                    "propose_s": pytest.approx(0.14)}
    both = merge([d, d])
    assert both["steps"] == 6 and both["plugin_s"] == pytest.approx(0.024) and both["share"] == pytest.approx(0.012)
    t.reset()
    assert t.as_dict()["steps"] == 0 and t.as_dict()["share"] is None
    assert set(t.phase_s) == set(PHASES)
    with pytest.raises(KeyError):
        t.add("nonsense", 1.0)
