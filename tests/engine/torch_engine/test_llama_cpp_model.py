"""llama.cpp kernels (`engine.torch_engine.llama_cpp_model`) behind the decoder's cache contract: logits of a
multi-token forward match one-token forwards, rollback is exact, contexts are reused clean,
the logits are the same model's as the torch path's, bad input is refused, and greedy
speculative output equals greedy plain output token for token on the real Qwen pair under a
JSON-schema grammar (the engine's invariant on these kernels)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from tests.conftest import json_schema_prompt

pytestmark = [pytest.mark.llama_cpp, pytest.mark.e2e]


@pytest.fixture(scope="module")
def smol(require_models: Any) -> Any:
    from engine import loader

    require_models("smollm2-135m")
    model, tok = loader.load_gguf("smollm2-135m", n_threads=2, n_ctx=256)
    return model, tok


def _ids(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def test_multi_token_forward_matches_one_token_forwards(smol: Any) -> None:
    model, tok = smol
    prompt = _ids(tok, "The quick brown fox jumps over the lazy dog. Then")
    tail = _ids(tok, " it ran into the forest and")[:5]
    one = model.new_cache()
    one.extend(prompt)
    rows = [one.extend([t])[0] for t in tail]  # 5 one-token forwards
    many = model.new_cache()
    many.extend(prompt)
    block = many.extend(tail, num_logits=len(tail))  # one 5-token forward, as a verify
    assert block.shape == (len(tail), model.vocab_size) and block.dtype == torch.float32
    stacked = torch.stack(rows)
    assert torch.equal(block.argmax(-1), stacked.argmax(-1))
    assert (block - stacked).abs().max().item() < 0.05 * stacked.abs().max().item()


def test_crop_is_an_exact_rollback(smol: Any) -> None:
    model, tok = smol
    prompt = _ids(tok, "def add(a, b):\n    return")
    cache = model.new_cache()
    cache.extend(prompt)
    drafts = _ids(tok, " a + b\n\nprint")[:4]
    first = cache.extend(drafts, num_logits=4)
    cache.crop(len(prompt))
    assert cache.tokens == prompt
    other = cache.extend(_ids(tok, " None")[:1])  # a rejected path written over the cropped positions
    cache.crop(len(prompt))
    again = cache.extend(drafts, num_logits=4)
    assert torch.equal(first, again)
    assert other.shape == (1, model.vocab_size)
    assert cache.pending_for_logits(prompt + drafts) == drafts[-1:]  # all cached: the last is re-fed
    assert len(cache) == len(prompt) + len(drafts) - 1


def test_pooled_contexts_start_empty(smol: Any) -> None:
    model, tok = smol
    prompt = _ids(tok, "Hello there, general")
    fresh = model.new_cache().extend(prompt)
    used = model.new_cache()
    used.extend(_ids(tok, "Some other text that fills the context first."))
    del used  # its context goes back to the pool, cleared
    reused = model.new_cache()
    assert len(reused) == 0
    assert torch.equal(reused.extend(prompt), fresh)


def test_a_new_cache_reuses_the_longest_common_prefix_and_forgets_on_request(smol: Any) -> None:
    model, tok = smol
    system = _ids(tok, "You are a careful assistant. Answer in JSON. ")
    first = model.new_cache(prefix=system + _ids(tok, "Question one?"))
    first.extend(system + _ids(tok, "Question one?"))
    want = first.extend(_ids(tok, " Yes")[:1])
    other = model.new_cache()
    other.extend(_ids(tok, "unrelated text"))
    del first, other  # both contexts go back to the pool, keeping what they hold
    second = model.new_cache(prefix=system + _ids(tok, "Question two?"))
    assert second.tokens == system + _ids(tok, "Question")  # the common prefix, cropped to it
    pending = second.pending_for_logits(system + _ids(tok, "Question one?"))
    assert pending == _ids(tok, "Question one?")[len(_ids(tok, "Question")):]
    second.extend(pending)
    got = second.extend(_ids(tok, " Yes")[:1])  # reused positions are the same keys/values (up to batch rounding)
    assert torch.equal(got.argmax(-1), want.argmax(-1)) and (got - want).abs().max().item() < 0.05 * want.abs().max().item()
    del second
    model.forget_prefixes()
    assert len(model.new_cache(prefix=system)) == 0


def test_bad_input_is_refused_and_the_cache_stays_usable(smol: Any) -> None:
    model, tok = smol
    cache = model.new_cache()
    with pytest.raises(ValueError, match="token id"):
        cache.extend([-1])
    with pytest.raises(ValueError, match="token id"):
        cache.extend([model.vocab_size])
    with pytest.raises(ValueError, match="exceed the context"):
        cache.extend([1] * (model.n_ctx + 1))
    with pytest.raises(ValueError, match="num_logits"):
        cache.extend([1, 2], num_logits=3)
    assert len(cache) == 0
    assert cache.extend(_ids(tok, "ok")).shape == (1, model.vocab_size)


def test_long_prompts_are_fed_in_batches(require_models: Any) -> None:
    from engine import loader

    require_models("smollm2-135m")
    model, tok = loader.load_gguf("smollm2-135m", n_threads=2, n_ctx=256)
    model.n_batch = 16  # batch boundary inside the prompt and inside the logits rows
    small = model.new_cache()
    ids = (_ids(tok, "one two three four five six seven eight nine ten ") * 4)[:40]
    chunked = small.extend(ids, num_logits=3)
    model.n_batch = 512
    whole = model.new_cache().extend(ids, num_logits=3)
    assert torch.equal(chunked.argmax(-1), whole.argmax(-1))
    assert (chunked - whole).abs().max().item() < 0.05 * whole.abs().max().item()


def test_same_model_as_the_torch_path(smol: Any) -> None:
    from engine import loader

    model, tok = smol
    torch_model, _ = loader.load("smollm2-135m", dtype="float32", device="cpu")
    from engine.torch_engine.kv_cache import KVCache

    ids = _ids(tok, "The capital of France is Paris. The capital of Germany is")
    gguf = model.new_cache().extend(ids, num_logits=len(ids))
    ref = KVCache(torch_model).extend(ids, num_logits=len(ids))
    cosine = torch.nn.functional.cosine_similarity(gguf, ref, dim=-1)
    agree = (gguf.argmax(-1) == ref.argmax(-1)).float().mean().item()
    assert cosine.min().item() > 0.98, cosine
    assert agree >= 0.8, agree


NEAR_TIE = 1.5  # logits: 2x the largest |difference| measured between a 9-token and 9 one-token forwards (0.36-0.64)


@pytest.mark.slow
def test_greedy_speculative_equals_greedy_plain_on_llama_cpp_kernels_up_to_near_ties(require_models: Any) -> None:
    """llama.cpp's multi-token forwards are not batch-invariant (a position's logits in a
    verify differ from a one-token decode's by up to ~0.6), so greedy speculative output
    equals greedy plain output token for token except where plain's choice was a near-tie:
    at the first divergence, the plain token's and the speculative token's logits (one
    forward over the common prefix) must be within NEAR_TIE. Where adaptive K finds that
    speculation cannot pay on these kernels (their verify costs ~n decodes on a CPU), the
    draft model never runs."""
    import jsonschema

    from engine import EngineConfig, loader
    from engine.pacing.cost_model import load_or_measure
    from engine.torch_engine.decoder import SpecDecoder
    from engine.types import GenerationRequest, SamplingOptions
    from grammars import GrammarCompiler

    require_models("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    target, tok = loader.load_gguf("qwen2.5-coder-1.5b", n_threads=2, n_ctx=1024)
    draft, _ = loader.load_gguf("qwen2.5-coder-0.5b", n_threads=2, n_ctx=1024)
    names = {"model": "qwen2.5-coder-1.5b", "draft_model": "qwen2.5-coder-0.5b", "kernels": "llama-cpp"}
    plain = SpecDecoder(target_model=target, tokenizer=tok, config=EngineConfig(**names, drafter="none", k=0))
    fixed = SpecDecoder(target_model=target, draft_model=draft, tokenizer=tok,
                        config=EngineConfig(**names, drafter="model", k=4, adaptive_k=False))
    costs = load_or_measure(target, draft, k_max=4, target_name=names["model"], draft_name=names["draft_model"])
    assert costs.kernel_path.startswith("llama.cpp") and costs.dtype == "gguf"
    adaptive = SpecDecoder(target_model=target, draft_model=draft, tokenizer=tok,
                           config=EngineConfig(**names, drafter="model", k=4, adaptive_k=True), costs=costs)
    compiler = GrammarCompiler(tok, vocab_size=plain.logits_width, stop_token_ids=sorted(plain.stop_token_ids))
    cases = [
        ({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}, "Give a person named Ann aged 31."),
        ({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
          "required": ["tags"]}, "Tag a Python tutorial."),
        ({"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]},
         "Pick a primary color."),
    ]
    verified, divergences = 0, []
    for i, (schema, prompt) in enumerate(cases):
        grammar, ids = json_schema_prompt(tok, compiler, schema, prompt)
        sampling = SamplingOptions(temperature=0.0, max_tokens=40)
        a = plain.generate(GenerationRequest(f"p{i}", ids, sampling, grammar=grammar))
        assert a.finish_reason == "stop"
        jsonschema.validate(json.loads(tok.decode(a.output_ids, skip_special_tokens=True)), schema)
        for j, spec in enumerate((fixed, adaptive)):
            b = spec.generate(GenerationRequest(f"s{i}{j}", ids, sampling, grammar=grammar))
            verified += b.stats.draft_tokens
            if spec is adaptive and not costs.pays_at_all:
                assert b.stats.draft_forwards == 0  # the draft model never ran (grammar-forced drafts are free)
            if a.output_ids == b.output_ids:
                continue
            at = next(n for n, (x, y) in enumerate(zip(a.output_ids, b.output_ids, strict=False)) if x != y)
            logits = target.new_cache().extend(ids + a.output_ids[:at])[0]
            gap = float(logits[a.output_ids[at]] - logits[b.output_ids[at]])
            divergences.append((i, j, at, round(gap, 3)))
    assert verified > 0  # the fixed-K decoder did verify drafts
    assert all(abs(gap) < NEAR_TIE for *_, gap in divergences), divergences


@pytest.mark.slow
def test_torch_target_with_llama_cpp_draft_is_exact_token_for_token(require_models: Any) -> None:
    """The default on a native-bf16 CPU: target on torch, draft on llama.cpp. The draft's q
    comes from other kernels and weights' numerics, which may change acceptance but never the
    output: greedy speculative output equals greedy plain output token for token (float32
    target, whose one- and multi-token forwards agree), with fixed K and with adaptive K."""
    from engine import EngineConfig, loader
    from engine.pacing.cost_model import load_or_measure
    from engine.torch_engine.decoder import SpecDecoder
    from engine.types import GenerationRequest, SamplingOptions
    from grammars import GrammarCompiler

    require_models("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    target, tok = loader.load("qwen2.5-coder-1.5b", dtype="float32", device="cpu")
    draft, _ = loader.load_gguf("qwen2.5-coder-0.5b", n_threads=2, n_ctx=1024)
    names = {"model": "qwen2.5-coder-1.5b", "draft_model": "qwen2.5-coder-0.5b", "dtype": "float32",
             "kernels": "torch", "draft_kernels": "llama-cpp"}
    plain = SpecDecoder(target_model=target, tokenizer=tok, config=EngineConfig(**names, drafter="none", k=0))
    fixed = SpecDecoder(target_model=target, draft_model=draft, tokenizer=tok,
                        config=EngineConfig(**names, drafter="model", k=4, adaptive_k=False))
    costs = load_or_measure(target, draft, k_max=4, target_name=names["model"], draft_name=names["draft_model"])
    adaptive = SpecDecoder(target_model=target, draft_model=draft, tokenizer=tok,
                           config=EngineConfig(**names, drafter="model", k=4, adaptive_k=True), costs=costs)
    compiler = GrammarCompiler(tok, vocab_size=plain.logits_width, stop_token_ids=sorted(plain.stop_token_ids))
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                               "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
              "required": ["name", "age", "tags"]}
    accepted, mismatches = 0, []
    for i, prompt in enumerate(["Describe Ann, 31, a Python developer.", "Describe Bo, 45, a chef."]):
        grammar, ids = json_schema_prompt(tok, compiler, schema, prompt)
        sampling = SamplingOptions(temperature=0.0, max_tokens=40)
        a = plain.generate(GenerationRequest(f"p{i}", ids, sampling, grammar=grammar))
        for j, spec in enumerate((fixed, adaptive)):
            b = spec.generate(GenerationRequest(f"s{i}{j}", ids, sampling, grammar=grammar))
            accepted += b.stats.accepted_tokens
            if a.output_ids != b.output_ids:
                mismatches.append((i, j, a.output_ids, b.output_ids))
    assert not mismatches, mismatches
    assert accepted > 0  # llama.cpp's drafts were accepted
