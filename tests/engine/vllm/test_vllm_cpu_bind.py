"""vLLM on CPU: VLLM_CPU_OMP_THREADS_BIND holds one CPU list per local rank (vLLM's CPU
executor asserts as many "|"-separated lists as tensor-parallel ranks); the engine sets it per
engine unless the operator did (no vLLM needed)."""

from __future__ import annotations

import os

import pytest

from engine.vllm import engine as vllm_engine
from engine.vllm.engine import _configure_env, cpu_bind


def test_one_list_per_rank() -> None:
    assert cpu_bind(1, [3, 0, 1, 2]) == "0,1,2,3"
    assert cpu_bind(2, [0, 1]) == "0|1"
    assert cpu_bind(2, [0, 1, 2, 3, 4]) == "0,1,2|3,4"
    assert cpu_bind(4, [4, 5]) == "4|5|4|5"  # fewer CPUs than ranks: shared
    for ranks in (1, 2, 3):
        assert len(cpu_bind(ranks, range(7)).split("|")) == ranks


def test_set_per_engine_unless_the_operator_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SPECGATE_VLLM_MODE", "SPECGATE_VLLM_DRAFT_MASK", "SPECGATE_VLLM_STEP_K", "LD_PRELOAD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPECGATE_VLLM_PRELOAD", "0")
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(vllm_engine, "_BIND_SET", None)
    cpus = sorted(os.sched_getaffinity(0))
    _configure_env(plugin_mode="full", draft_mask=True, device="cpu", ranks=1)
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == ",".join(map(str, cpus))
    _configure_env(plugin_mode="full", draft_mask=True, device="cpu", ranks=2)  # a second engine, TP=2
    assert len(os.environ["VLLM_CPU_OMP_THREADS_BIND"].split("|")) == 2
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    _configure_env(plugin_mode="full", draft_mask=True, device="cpu", ranks=2)
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
