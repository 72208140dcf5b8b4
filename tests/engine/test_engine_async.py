"""The async TorchEngine: concurrency leaves outputs unchanged, cancellation frees state,
the load switch, stop strings, and the incremental detokenizer."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

from engine import EngineConfig, GenerationRequest, SamplingOptions, build_engine
from engine.pacing.adaptive import AdaptiveK
from engine.torch_engine.detokenizer import Detokenizer


@pytest.fixture(scope="module")
def engine_factory(tiny_target_dir: pathlib.Path, tiny_draft_dir: pathlib.Path) -> Any:
    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("adaptive_k", False)  # fixed K unless a test asks: tiny models' timings are noise
        config = EngineConfig(model=str(tiny_target_dir), draft_model=str(tiny_draft_dir), dtype="float32", **kwargs)
        return build_engine(config)

    return make


async def _collect(engine: Any, request: GenerationRequest) -> tuple[list[int], str, Any]:
    ids: list[int] = []
    text = ""
    last = None
    async for delta in engine.generate(request):
        ids += delta.token_ids
        text += delta.text
        last = delta
    assert last is not None and last.finish_reason is not None and last.stats is not None
    return ids, text, last


def _req(tokenizer: Any, rid: str, text: str, **sampling: Any) -> GenerationRequest:
    sampling.setdefault("temperature", 0.0)
    sampling.setdefault("max_tokens", 8)
    sampling.setdefault("ignore_eos", True)
    return GenerationRequest(rid, list(tokenizer.encode(text)), SamplingOptions(**sampling))


async def test_concurrent_equals_alone_and_load_switch(engine_factory: Any) -> None:
    engine = engine_factory(k=3, max_spec_concurrency=1)
    tok = engine.tokenizer
    prompts = ["one two three one two", "hello hello world", "a b c a b c a"]
    await engine.start()
    try:
        alone = [await _collect(engine, _req(tok, f"a{i}", p)) for i, p in enumerate(prompts)]
        assert all(out[2].stats.draft_tokens > 0 for out in alone)  # alone: speculation on
        together = await asyncio.gather(*[_collect(engine, _req(tok, f"b{i}", p)) for i, p in enumerate(prompts)])
    finally:
        await engine.shutdown()
    for (ids_a, text_a, _), (ids_b, text_b, _) in zip(alone, together, strict=True):
        assert ids_a == ids_b and text_a == text_b
    snapshot = engine.stats_snapshot()
    assert snapshot.requests_finished == 6 and snapshot.draft_tokens > 0


async def test_load_switch_turns_speculation_off(engine_factory: Any) -> None:
    engine = engine_factory(k=3, max_spec_concurrency=1)
    tok = engine.tokenizer
    # queue both before the worker starts, so they run side by side from their first step
    tasks = [asyncio.create_task(_collect(engine, _req(tok, f"c{i}", "x y z x y z"))) for i in range(2)]
    await asyncio.sleep(0.05)
    await engine.start()
    try:
        results = await asyncio.gather(*tasks)
    finally:
        await engine.shutdown()
    assert all(r[2].stats.draft_tokens == 0 for r in results)


async def test_cancel_frees_state(engine_factory: Any) -> None:
    engine = engine_factory(k=2, max_num_seqs=1)
    tok = engine.tokenizer
    await engine.start()
    try:
        gen = engine.generate(_req(tok, "d0", "count: 1 2 3", max_tokens=200))
        first = await gen.__anext__()
        assert first.finish_reason is None
        queued = engine.generate(_req(tok, "d1", "queued", max_tokens=200))
        task = asyncio.create_task(queued.__anext__())
        await asyncio.sleep(0.05)
        assert engine.live_request_ids() == {"d0", "d1"}
        await gen.aclose()  # the consumer stops iterating
        task.cancel()
        for _ in range(200):
            if not engine.live_request_ids():
                break
            await asyncio.sleep(0.05)
        assert engine.live_request_ids() == set()
        assert engine.num_active == 0 and engine.queue_depth == 0
    finally:
        await engine.shutdown()


async def test_stop_strings_are_trimmed(engine_factory: Any) -> None:
    engine = engine_factory(drafter="ngram", k=3)
    tok = engine.tokenizer
    await engine.start()
    try:
        ids, text, _ = await _collect(engine, _req(tok, "e", "abc abc abc", max_tokens=16))
        full = tok.decode(ids, skip_special_tokens=True)
        assert full and text == full
        stop = full[len(full) // 2 : len(full) // 2 + 2] or full[:1]
        _, cut, last = await _collect(engine, _req(tok, "f", "abc abc abc", max_tokens=16, stop=(stop,)))
    finally:
        await engine.shutdown()
    assert last.finish_reason == "stop" and cut == full[: full.find(stop)]


def test_detokenizer_never_splits_utf8_and_holds_back_stop(qwen_tokenizer: Any) -> None:
    text = "héllo 😀 wörld STOP tail"
    ids = qwen_tokenizer.encode(text)
    detok = Detokenizer(qwen_tokenizer)
    pieces = [detok.push([t])[0] for t in ids]
    assert "\ufffd" not in "".join(pieces) and "".join(pieces) + detok.flush() == text
    detok = Detokenizer(qwen_tokenizer, stop=("STOP",))
    out, stopped = "", False
    for t in ids:
        delta, stopped = detok.push([t])
        out += delta
        if stopped:
            break
    assert stopped and out == "héllo 😀 wörld "


def test_adaptive_k_tracks_acceptance_and_costs() -> None:
    ctl = AdaptiveK(k_max=6)
    assert ctl.choose_k() == 6
    ctl.observe(k=6, num_drafts=6, num_accepted=6, draft_s=0.06, target_s=0.2)
    assert ctl.choose_k() == 0  # measure one plain step first
    ctl.observe(k=0, num_drafts=0, num_accepted=0, draft_s=0.0, target_s=0.1)
    for _ in range(20):  # cheap drafts, always accepted: speculate at full depth
        ctl.observe(k=6, num_drafts=6, num_accepted=6, draft_s=0.001, target_s=0.11)
    assert ctl.choose_k() == 6
    for _ in range(40):  # expensive drafts, never accepted: speculation off
        ctl.observe(k=1, num_drafts=1, num_accepted=0, draft_s=0.08, target_s=0.12)
    assert ctl.choose_k() == 0
    for _ in range(ctl.probe_every):
        ctl.observe(k=0, num_drafts=0, num_accepted=0, draft_s=0.0, target_s=0.1)
    assert ctl.choose_k() == 1  # periodic re-probe


async def test_engine_protocol_and_per_request_draft_mask(engine_factory: Any) -> None:
    """The torch engine is an `Engine`; a request's `draft_mask` switches the draft mask for
    that request only: greedy output identical, the unmasked draft strays off the grammar."""
    from engine import Engine
    from grammars import spec_from_request

    engine = engine_factory(k=4)
    assert isinstance(engine, Engine)
    body = {"structured_outputs": {"regex": "(yes|no|maybe) [0-9]{2}"}}
    grammar = engine.grammar_compiler.compile(spec_from_request(body))
    tok = engine.tokenizer
    await engine.start()
    try:
        runs = {}
        for mask in (True, False, None):
            request = _req(tok, f"m{mask}", "Answer:", max_tokens=12, ignore_eos=False)
            request.grammar, request.draft_mask = grammar, mask
            runs[mask] = await _collect(engine, request)
    finally:
        await engine.shutdown()
    assert runs[True][0] == runs[False][0] == runs[None][0]
    assert runs[True][2].stats.draft_strays == 0 and runs[None][2].stats.draft_strays == 0
    unmasked, masked = runs[False][2].stats, runs[True][2].stats
    assert unmasked.draft_strays > 0
    # the unmasked argmax draft's refused tokens were proposed but cut before verification
    assert unmasked.proposed_tokens > unmasked.draft_tokens
    assert masked.proposed_tokens == masked.draft_tokens


async def test_concurrent_requests_sharing_a_prefix(engine_factory: Any) -> None:
    """Requests over one long shared prefix, run together through the engine's worker with
    the prefix cache on, give what each gives alone with it off; the later ones start from
    the prefix a running one published."""
    shared = "schema: " + " ".join(f"table{i} id name" for i in range(20)) + " question: "
    questions = ["count rows", "list names of table3", "largest id"]
    off = engine_factory(k=3, prefix_cache_mib=0)
    on = engine_factory(k=3)
    tok = on.tokenizer
    await off.start()
    try:
        alone = [await _collect(off, _req(tok, f"a{i}", shared + q)) for i, q in enumerate(questions)]
    finally:
        await off.shutdown()
    await on.start()
    try:
        together = await asyncio.gather(*[_collect(on, _req(tok, f"b{i}", shared + q)) for i, q in enumerate(questions)])
    finally:
        await on.shutdown()
    assert [out[0] for out in together] == [out[0] for out in alone]
    assert sum(out[2].stats.cached_tokens > 0 for out in together) >= len(questions) - 1
    stats = on.prefix_cache_stats()
    assert off.prefix_cache_stats() is None and stats is not None and stats.pools["target"].hits >= 2


def test_json_property_order_reaches_the_engines_grammar_compiler(engine_factory: Any) -> None:
    engine = engine_factory(k=2, json_property_order="any")
    assert engine.grammar_compiler.property_order == "any"
    with pytest.raises(ValueError, match="json_property_order"):
        engine_factory(json_property_order="sorted")
