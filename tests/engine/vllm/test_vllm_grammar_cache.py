"""engine.vllm.grammar_cache.WorkerGrammars (pure: fake compile / matcher functions): compiles
each grammar once, ahead of time when prefetched, keeps a bounded LRU, and a failed compile
raises at `matcher` and is not cached."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from engine.vllm.grammar_cache import WorkerGrammars


def _grammars(**kw: Any) -> tuple[WorkerGrammars, list[Any], list[str]]:
    compiled: list[Any] = []
    threads: list[str] = []

    def compile_ctx(key: Any) -> Any:
        if key == "bad":
            raise ValueError("bad grammar")
        compiled.append(key)
        threads.append(threading.current_thread().name)
        return f"ctx:{key}"

    return WorkerGrammars(compile_ctx=compile_ctx, make_matcher=lambda ctx, stops: (ctx, tuple(stops)), **kw), \
        compiled, threads


def test_compiles_once_and_builds_a_matcher_per_request() -> None:
    g, compiled, _ = _grammars()
    assert g.matcher("a", [1]) == ("ctx:a", (1,))
    assert g.matcher("a", [2]) == ("ctx:a", (2,))  # stops are per request, the grammar is shared
    assert compiled == ["a"] and g.hits == 1 and g.misses == 1


def test_prefetch_compiles_in_the_background_once() -> None:
    g, compiled, threads = _grammars()
    g.prefetch("a")
    g.prefetch("a")  # in flight: not submitted twice
    assert g.matcher("a", []) == ("ctx:a", ())
    g.prefetch("a")  # cached: nothing to do
    assert compiled == ["a"] and g.prefetched == 1
    assert threads[0].startswith("specgate-grammar")
    g.close()


def test_lru_is_bounded() -> None:
    g, compiled, _ = _grammars(max_entries=2, background=False)
    for key in ("a", "b", "a", "c", "a", "b"):
        g.matcher(key, [])
    assert compiled == ["a", "b", "c", "b"]  # "b" was the least recently used when "c" came
    assert len(g._cache) == 2


def test_failed_compile_raises_and_is_not_cached() -> None:
    g, _, _ = _grammars()
    g.prefetch("bad")
    with pytest.raises(ValueError):
        g.matcher("bad", [])
    with pytest.raises(ValueError):
        g.matcher("bad", [])
    with pytest.raises(ValueError):
        WorkerGrammars(compile_ctx=str, make_matcher=lambda c, s: c, max_entries=0)
