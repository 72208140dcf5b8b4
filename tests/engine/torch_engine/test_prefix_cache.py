"""Automatic prefix caching on the tiny float32 pair with the real Qwen tokenizer: a restored
prefix gives the logits of a full prefill, greedy outputs do not depend on the cache (nor on
speculation), the memory bound holds under eviction, a request sharing a prefix with a
running one is exact, and concurrent use from threads keeps the index consistent."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from engine.torch_engine.kv_cache import KVCache
from engine.torch_engine.prefix_cache import PrefixCache
from engine.types import GenerationRequest, SamplingOptions

SCHEMA = (
    "CREATE TABLE singer (singer_id INT PRIMARY KEY, name TEXT, country TEXT, age INT); "
    "CREATE TABLE concert (concert_id INT PRIMARY KEY, concert_name TEXT, stadium_id INT, year TEXT); "
)
QUESTIONS = ("How many singers are there?", "List the names of concerts in 2014.", "What is the oldest age?")


def _prompt(tokenizer: Any, question: str) -> list[int]:
    text = f"<|im_start|>user\nSQLite schema:\n{SCHEMA}\nQuestion: {question}<|im_end|>\n<|im_start|>assistant\n"
    return list(tokenizer.encode(text))


def _request(tokenizer: Any, question: str, *, rid: str = "r", max_tokens: int = 20) -> GenerationRequest:
    return GenerationRequest(rid, _prompt(tokenizer, question), SamplingOptions(temperature=0.0, max_tokens=max_tokens))


def _common_prefix(a: list[int], b: list[int]) -> int:
    return next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)


def _blocks_consistent(cache: PrefixCache) -> None:
    """Every stored block's predecessor is stored too (no unreachable block)."""
    for pool, index in cache._keys.items():
        ids = {block.block_id for block in index.values()}
        for (parent, _tokens) in index:
            assert parent == -1 or parent in ids, f"{pool}: block after evicted block {parent}"
    assert cache.bytes_used == sum(b.nbytes for b in cache._blocks.values()) <= cache.capacity_bytes


def test_restored_prefix_gives_full_prefill_logits(tiny_pair: Any) -> None:
    target, _, tokenizer = tiny_pair
    cache = PrefixCache(capacity_bytes=1 << 30, block_tokens=8)
    first, second = _prompt(tokenizer, QUESTIONS[0]), _prompt(tokenizer, QUESTIONS[1])
    kv = KVCache(target)
    kv.extend(first)
    assert cache.publish(kv, first, pool="target") == len(first) // 8 * 8

    seeded = KVCache(target)
    restored = cache.restore(seeded, second, pool="target")
    common = _common_prefix(first, second)
    assert restored == common // 8 * 8 and restored > 0
    assert seeded.tokens == second[:restored]
    got = seeded.extend(second[restored:], num_logits=3)  # [3, V]
    want = KVCache(target).extend(second, num_logits=3)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    other = KVCache(target)  # a different pool never answers for the target
    assert cache.restore(other, second, pool="draft") == 0 and len(other) == 0


def test_identical_prompt_restores_all_but_its_last_token(tiny_pair: Any) -> None:
    target, _, tokenizer = tiny_pair
    cache = PrefixCache(capacity_bytes=1 << 30, block_tokens=4)
    prompt = _prompt(tokenizer, QUESTIONS[2])[:40]  # a multiple of the block size
    kv = KVCache(target)
    want = kv.extend(prompt)  # [1, V]
    cache.publish(kv, prompt, pool="target")
    again = KVCache(target)
    restored = cache.restore(again, prompt, pool="target")
    assert restored == 36  # 39 positions at most, in whole blocks
    torch.testing.assert_close(again.extend(prompt[restored:]), want, rtol=1e-5, atol=1e-5)


def test_restored_tensors_are_copies(tiny_pair: Any) -> None:
    target, _, tokenizer = tiny_pair
    cache = PrefixCache(capacity_bytes=1 << 30, block_tokens=8)
    prompt = _prompt(tokenizer, QUESTIONS[0])
    kv = KVCache(target)
    kv.extend(prompt)
    cache.publish(kv, prompt, pool="target")
    a, b = KVCache(target), KVCache(target)
    cache.restore(a, prompt, pool="target")
    cache.restore(b, prompt, pool="target")
    stored = next(iter(cache._blocks.values())).layers[0][0]
    before = stored.clone()
    a.cache.layers[0].keys.add_(1.0)  # a sequence writing into its cache in place
    assert torch.equal(stored, before)
    assert not torch.equal(a.cache.layers[0].keys, b.cache.layers[0].keys)


@pytest.mark.parametrize("drafter,k", [("none", 0), ("model", 3)])
def test_greedy_outputs_identical_with_cache_on_and_off(
    drafter: str, k: int, make_decoder: Any, tiny_pair: Any
) -> None:
    tokenizer = tiny_pair[2]
    plain_off = make_decoder(drafter="none", k=0, prefix_cache_mib=0)
    decoder = make_decoder(drafter=drafter, k=k)
    assert plain_off.prefix_cache is None and decoder.prefix_cache is not None
    shared = _common_prefix(_prompt(tokenizer, QUESTIONS[0]), _prompt(tokenizer, QUESTIONS[1]))
    for number, question in enumerate((*QUESTIONS, QUESTIONS[0])):  # the last: an identical prompt
        want = plain_off.generate(_request(tokenizer, question, max_tokens=12)).output_ids
        seq = decoder.generate(_request(tokenizer, question, max_tokens=12))
        assert seq.output_ids == want, question
        if number > 0:  # the schema prefix is cached from the first request on (whole blocks)
            assert seq.stats.cached_tokens >= shared // 16 * 16 > 0
    stats = decoder.prefix_cache.stats()
    assert stats.pools["target"].hits == len(QUESTIONS) and stats.pools["target"].queries == len(QUESTIONS) + 1
    assert stats.pools["target"].cached_tokens > 0
    if drafter == "model":
        assert stats.pools["draft"].hits > 0 and stats.pools["draft"].bytes > 0


def test_draft_catch_up_counts_only_uncached_positions(make_decoder: Any, tiny_pair: Any) -> None:
    tokenizer = tiny_pair[2]
    decoder = make_decoder(drafter="model", k=3)
    decoder.generate(_request(tokenizer, QUESTIONS[0]))  # publishes both models' prompts
    seq = decoder.new_sequence(_request(tokenizer, QUESTIONS[1]))
    assert seq.draft_kv is not None and seq.stats.draft_cached_tokens == len(seq.draft_kv) > 0
    decoder.step(seq)  # the first step: target only
    behind = len(seq.tokens) - len(seq.draft_kv)
    assert behind == len(seq.tokens) - seq.stats.draft_cached_tokens < len(seq.tokens)
    seq.free()


def test_request_sharing_a_prefix_with_a_running_one(make_decoder: Any, tiny_pair: Any) -> None:
    tokenizer = tiny_pair[2]
    reference = make_decoder(drafter="model", k=3, prefix_cache_mib=0)
    want = [reference.generate(_request(tokenizer, q, max_tokens=16)).output_ids for q in QUESTIONS[:2]]
    decoder = make_decoder(drafter="model", k=3)
    first = decoder.new_sequence(_request(tokenizer, QUESTIONS[0], rid="a", max_tokens=16))
    decoder.step(first)
    decoder.step(first)  # running: its prompt is published, its caches hold drafts and outputs
    second = decoder.new_sequence(_request(tokenizer, QUESTIONS[1], rid="b", max_tokens=16))
    assert second.stats.cached_tokens > 0 and second.stats.draft_cached_tokens > 0
    while not (first.finished and second.finished):
        for seq in (first, second):
            if not seq.finished:
                decoder.step(seq)
    assert [first.output_ids, second.output_ids] == want


def test_eviction_respects_the_bound(tiny_pair: Any) -> None:
    target, _, tokenizer = tiny_pair
    probe = KVCache(target)
    probe.extend(list(range(100, 108)))
    block_bytes = sum(k.numel() * k.element_size() * 2 for k, _ in probe.export_range(0, 8))
    cache = PrefixCache(capacity_bytes=10 * block_bytes, block_tokens=8)
    prompts = [_prompt(tokenizer, f"question number {i} about singers and concerts?") for i in range(6)]
    for prompt in prompts:
        kv = KVCache(target)
        kv.extend(prompt)
        cache.publish(kv, prompt, pool="target")
        _blocks_consistent(cache)
    stats = cache.stats()
    assert stats.bytes <= 10 * block_bytes and stats.pools["target"].evicted_blocks > 0
    # the most recent prompt is the one still cached, and it restores exactly
    kv = KVCache(target)
    restored = cache.restore(kv, prompts[-1], pool="target")
    assert restored > 0
    torch.testing.assert_close(kv.extend(prompts[-1][restored:]), KVCache(target).extend(prompts[-1]),
                               rtol=1e-5, atol=1e-5)
    huge = PrefixCache(capacity_bytes=3 * block_bytes, block_tokens=8)  # a prompt longer than the bound
    kv = KVCache(target)
    kv.extend(prompts[0])
    assert huge.publish(kv, prompts[0], pool="target") == 3 * 8
    _blocks_consistent(huge)


def test_concurrent_publish_and_restore_from_threads(tiny_pair: Any) -> None:
    target, _, tokenizer = tiny_pair
    prompts = [_prompt(tokenizer, q) for q in QUESTIONS]
    filled = []
    for prompt in prompts:
        kv = KVCache(target)
        kv.extend(prompt)
        filled.append(kv)
    block_bytes = sum(k.numel() * k.element_size() * 2 for k, _ in filled[0].export_range(0, 4))
    cache = PrefixCache(capacity_bytes=40 * block_bytes, block_tokens=4)  # forces evictions
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(30):
                index = (seed + i) % len(prompts)
                cache.publish(filled[index], prompts[index], pool="target")
                kv = KVCache(target)
                restored = cache.restore(kv, prompts[(index + 1) % len(prompts)], pool="target")
                assert kv.tokens == prompts[(index + 1) % len(prompts)][:restored]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    _blocks_consistent(cache)


def test_config_rejects_negative_bound() -> None:
    from engine.config import EngineConfig

    with pytest.raises(ValueError, match="prefix_cache_mib"):
        EngineConfig(model="m", drafter="none", prefix_cache_mib=-1)
    assert PrefixCache.from_mib(0) is None
