"""The KV cache adapter: prefill + extend + crop gives the logits of a fresh prefill (float32)."""

from __future__ import annotations

import pathlib

import pytest
import torch

from engine.torch_engine.kv_cache import KVCache


@pytest.fixture(scope="module")
def tiny_model(tiny_target_dir: pathlib.Path):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_target_dir), dtype=torch.float32).eval()


def test_crop_then_extend_equals_fresh_prefill(tiny_model) -> None:  # type: ignore[no-untyped-def]
    prompt = [151644, 872, 198, 9707, 11, 1879]
    rejected = [15, 16, 17, 18]
    accepted = [220, 330]
    cache = KVCache(tiny_model)
    cache.extend(prompt)
    cache.extend(rejected, num_logits=len(rejected))
    cache.crop(len(prompt))
    assert cache.tokens == prompt and cache.cache.get_seq_length() == len(prompt)
    got = cache.extend(accepted, num_logits=2)  # [2, V]

    fresh = KVCache(tiny_model)
    want = fresh.extend(prompt + accepted, num_logits=2)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # and against a cache-less forward
    with torch.inference_mode():
        plain = tiny_model(input_ids=torch.tensor([prompt + accepted])).logits[0, -2:].float()
    torch.testing.assert_close(got, plain, rtol=1e-5, atol=1e-5)


def test_sync_to_crops_to_common_prefix(tiny_model) -> None:  # type: ignore[no-untyped-def]
    cache = KVCache(tiny_model)
    cache.extend([1, 2, 3, 4, 5])
    todo = cache.sync_to([1, 2, 3, 9, 9, 9])
    assert todo == [9, 9, 9] and cache.tokens == [1, 2, 3]
    assert cache.cache.get_seq_length() == 3
    assert cache.sync_to([7]) == [7] and len(cache) == 0


def test_rejects_negative_ids_and_empty(tiny_model) -> None:  # type: ignore[no-untyped-def]
    cache = KVCache(tiny_model)
    with pytest.raises(ValueError, match="negative"):
        cache.extend([1, -1])
    with pytest.raises(ValueError):
        cache.extend([])
