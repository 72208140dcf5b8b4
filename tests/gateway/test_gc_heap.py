"""gateway.gc_heap: the heap is collected, then frozen, at startup and after a grammar
family's first compile (once per family); off, nothing is frozen. Collections are timed per
generation and exported as specgate_gc_pause_seconds."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gateway_harness import API_KEY, make_settings, start_server

from gateway.gc_heap import PAUSE_BUCKETS_S, GcPauses, HeapFreezer

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
          "additionalProperties": False}


@pytest.fixture()
def unfrozen() -> Iterator[None]:
    """The test process's heap as it was: nothing frozen before or after."""
    gc.unfreeze()
    yield
    gc.unfreeze()


class _Node:
    def __init__(self) -> None:
        self.other: Any = self  # a reference cycle: only the collector frees it


def test_freeze_collects_garbage_cycles_first_and_once_per_family(unfrozen: None) -> None:
    off = HeapFreezer(enabled=False)
    assert off.freeze("startup") == 0 and not off.after_compile("sql_schema")
    assert gc.get_freeze_count() == 0 and off.freezes == []

    node = _Node()
    dead = weakref.ref(node)
    del node  # garbage, but a cycle: alive until a collection
    heap = HeapFreezer(enabled=True)
    assert heap.freeze("startup") == gc.get_freeze_count() > 0
    assert dead() is None  # collected, not frozen
    assert heap.after_compile("sql_schema") and not heap.after_compile("sql_schema")
    assert heap.after_compile("json_schema")
    assert heap.freezes == ["startup", "first sql_schema grammar", "first json_schema grammar"]


def test_server_freezes_after_startup_and_a_familys_first_grammar(
        unfrozen: None, tiny_engine_factory: Callable[..., Any]) -> None:
    import httpx

    from gateway.app import create_app

    engine = tiny_engine_factory()
    app = create_app(make_settings(gc_freeze=True), engine=engine)
    for running in start_server(app, engine):
        heap = app.state.gateway.heap
        assert heap.freezes == ["startup"] and gc.get_freeze_count() > 0
        with httpx.Client(base_url=running.base_url, headers={"Authorization": f"Bearer {API_KEY}"},
                          timeout=120) as http:
            model = http.get("/v1/models").json()["data"][0]["id"]
            for name in ("a", "b"):  # two schemas of one family: one freeze
                schema = {**SCHEMA, "properties": {name: {"type": "integer"}}, "required": [name]}
                reply = http.post("/v1/chat/completions", json={
                    "model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}],
                    "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
                assert reply.status_code == 200, reply.text
            metrics = http.get("/metrics").text
        assert heap.freezes == ["startup", "first json_schema grammar"]
        full = [line for line in metrics.splitlines() if line.startswith('specgate_gc_pause_seconds_count{generation="2"}')]
        assert full and float(full[0].split()[-1]) >= 1  # the json_schema freeze's collection, at least


def test_gc_pauses_are_timed_per_generation_until_uninstalled() -> None:
    pauses = GcPauses()
    pauses.install()
    pauses.install()  # once only
    try:
        gc.collect(0)
        gc.collect()
    finally:
        pauses.uninstall()
    assert sum(pauses.counts[0]) >= 1 and sum(pauses.counts[2]) >= 1 and pauses.sums[2] > 0
    assert len(pauses.counts[2]) == len(PAUSE_BUCKETS_S) + 1
    before = [list(c) for c in pauses.counts]
    gc.collect()
    assert pauses.counts == before  # uninstalled: nothing counted
    (family,) = list(pauses.collect())
    by_generation = {s.labels["generation"]: s.value for s in family.samples if s.name.endswith("_count")}
    assert by_generation == {str(g): float(sum(before[g])) for g in range(3)}
