"""The engine's output law, through the real decode path, with a test that can fail.

`SpecDecoder.step` (masked draft model, K = 2, temperature > 0) on a pair of tiny random
Qwen2 models with the real Qwen2.5 tokenizer, under the grammar `[0-7][0-7]` (8 allowed
tokens at each of the first two positions, then a stop token). The two models are built to
be *peaked and clearly different* over those 8 tokens (untied lm_head, final-norm weights
scaled by LOGIT_SCALE: logits x10; different seeds), so that a speculative step that emits the
draft's law, recovers from p, uses a wrong residual or a mismatched q moves the law of the
first two tokens far from the target's. The expected law is computed from the target alone
(one plain forward per prefix, masked softmax over the grammar-allowed ids, written out in
this file rather than taken from `sampler.probs_from_logits`), and the speculative samples
are compared with it by a seeded chi-square test.

Power: the same check is run, with fewer samples (a smaller N only makes a biased engine
harder to catch), against deliberately broken engines injected through named seams:

- `unmasked_q`: drafts are drawn from the masked q but verification is told the q of the
  draft's T *without* the grammar mask. Seams: `RequestTransform.probs` as called inside
  `ModelDrafter.propose` (the drafter's side of the one T) and the `sample_from_probs` name
  that `engine/drafters/model.py` imports (its draw).
- `recover_from_p`: at the first rejection the recovered token comes from p instead of
  norm((p - q)+). Seam: `sampler.rejection.residual_weights_` (the recovered-token weights
  inside the `rejection_sample` that `engine/torch_engine/decoder.py` calls).
- `wrong_residual`: recovered from norm((q - p)+) (sign slip). Same seam.
- `uniform_target`: the verify step's T ignores the target logits (plain uniform sampling
  over the mask). Seam: the `probs_from_logits` name that `engine/torch_engine/decoder.py` imports (the
  target's T in `SpecDecoder._sample`).
- `target_ignores_top_k_top_p`: the target's T drops top-k / top-p while the drafter's keeps
  them (two transforms where the invariant wants one). Same seam.
- `span_q_not_one_hot` (and `history_q_not_one_hot`, the same seam for history drafts,
  `engine.drafters.history`): grammar-forced span tokens (`engine.drafters.span`; the grammar
  `[0-7] and the[0-7]` forces " and the" after the first digit) are proposed deterministically
  but verification is told a q that is not one-hot there. Seam: `RequestTransform.one_hot`
  (the drafter's q rows for forced tokens; the decoder's other one-hot rows are never read). Checked on the span grammar's own law (the first digit
  and the first token after it, where the span's proposal is judged).

After the engine refactor (one shared T), re-point these seams at the new names; each
broken variant must keep failing, the correct engine must keep passing.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from engine.types import GenerationRequest, SamplingOptions

QWEN_LOGITS = 151_936
GRAMMAR_BODY = {"structured_outputs": {"regex": "[0-7][0-7]"}}
SPAN_GRAMMAR_BODY = {"structured_outputs": {"regex": "[0-7] and the[0-7]"}}  # a forced span after a free digit
PROMPT = "Pick two digits:"
K = 2
TARGET_SEED, DRAFT_SEED, LOGIT_SCALE = 3, 0, 10.0
BROKEN_SAMPLES = 500    # broken engines: fewer samples than the correct run, still caught
PASS_P = 1e-3           # seeded, hence deterministic; a correct engine sits far above this
FAIL_P = 1e-6

SAMPLINGS = {  # name: (request parameters, requests sampled for the correct engine)
    "T1": (SamplingOptions(temperature=1.0, max_tokens=3), 2000),
    "T0.8-topk6-topp0.95": (SamplingOptions(temperature=0.8, top_k=6, top_p=0.95, max_tokens=3), 1500),
}


def _peaked_qwen(seed: int) -> Any:
    """A tiny random Qwen2 (1 layer, hidden 32) with the Qwen2.5 logits width, an untied lm_head
    (a tied one makes "repeat the last token" dominate every model alike) and logits scaled by
    LOGIT_SCALE through the final norm (random logits have std ~0.1: nearly uniform)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=QWEN_LOGITS, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
        tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151645, pad_token_id=151643,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        model.model.norm.weight.mul_(LOGIT_SCALE)
    return model


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Any:
    """Tiny models run as fast on one thread, and a second one only fights the other
    processes of a loaded 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def law_world(qwen_tokenizer: Any) -> dict[str, Any]:
    from engine.loader import model_stop_token_ids
    from grammars import GrammarCompiler, spec_from_request

    target, draft = _peaked_qwen(TARGET_SEED), _peaked_qwen(DRAFT_SEED)
    compiler = GrammarCompiler(
        qwen_tokenizer, vocab_size=QWEN_LOGITS, stop_token_ids=model_stop_token_ids(target, qwen_tokenizer)
    )
    spec, span_spec = spec_from_request(GRAMMAR_BODY), spec_from_request(SPAN_GRAMMAR_BODY)
    assert spec is not None and span_spec is not None
    return {
        "target": target, "draft": draft, "tokenizer": qwen_tokenizer,
        "grammar": compiler.compile(spec), "prompt": list(qwen_tokenizer.encode(PROMPT)),
        "span_grammar": compiler.compile(span_spec),
    }


def _allowed_ids(matcher: Any) -> list[int]:
    from sampler import allocate_token_bitmask, unpack_bitmask

    bitmask = allocate_token_bitmask(1, QWEN_LOGITS)
    matcher.fill_mask(bitmask, row=0)
    return torch.nonzero(unpack_bitmask(bitmask, QWEN_LOGITS)[0]).flatten().tolist()


def _reference_probs(logits: torch.Tensor, allowed: list[int], sampling: SamplingOptions) -> dict[int, float]:
    """Plain masked sampling's law of one token, written out independently of `sampler`:
    restrict to the allowed ids, temperature, top-k, top-p (smallest prefix reaching top_p),
    softmax. Random float logits have no ties."""
    x = logits[allowed].double() / sampling.temperature
    order = torch.argsort(x, descending=True).tolist()
    if 0 < sampling.top_k < len(order):
        order = order[: sampling.top_k]
    probs = torch.softmax(x[order], dim=0)
    if sampling.top_p < 1.0:
        mass_before = torch.cumsum(probs, 0) - probs
        keep = int((mass_before < sampling.top_p).sum())
        order, probs = order[:keep], torch.softmax(x[order[:keep]], dim=0)
    return {allowed[i]: float(p) for i, p in zip(order, probs, strict=True)}


@torch.no_grad()
def _last_logits(model: Any, ids: list[int]) -> torch.Tensor:
    return model(input_ids=torch.tensor([ids]), logits_to_keep=1).logits[0, -1].float()


def _first_two_law(world: dict[str, Any], model: Any, sampling: SamplingOptions,
                   grammar: str = "grammar") -> dict[tuple[int, int], float]:
    """Exact law of the first two tokens of plain masked sampling from `model` under
    `world[grammar]` (both grammars start with a free digit)."""
    prompt, matcher = world["prompt"], world[grammar].matcher()
    digits = world["tokenizer"].convert_tokens_to_ids(list("01234567"))
    law: dict[tuple[int, int], float] = {}
    allowed1 = _allowed_ids(matcher)
    assert allowed1 == sorted(digits), "the grammar should allow exactly the 8 digit tokens"
    for t1, p1 in _reference_probs(_last_logits(model, prompt), allowed1, sampling).items():
        assert matcher.accept_token(t1)
        allowed2 = _allowed_ids(matcher)
        assert (allowed2 == sorted(digits)) == (grammar == "grammar")
        for t2, p2 in _reference_probs(_last_logits(model, [*prompt, t1]), allowed2, sampling).items():
            law[(t1, t2)] = p1 * p2
        matcher.rollback(1)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-9)
    return law


def _chi_square_pvalue(counts: Counter[tuple[int, int]], law: dict[tuple[int, int], float]) -> float:
    """Goodness of fit; 0.0 if any sample falls where the law has no mass. Cells with an
    expected count below 5 are pooled into one."""
    from scipy.stats import chisquare

    if any(cell not in law for cell in counts):
        return 0.0
    n = sum(counts.values())
    cells = sorted(law)
    observed = np.array([counts[c] for c in cells], dtype=np.float64)
    expected = np.array([law[c] for c in cells]) * n
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    return float(chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def _speculative_counts(
    world: dict[str, Any], sampling: SamplingOptions, samples: int, *, seed: int = 0, grammar: str = "grammar",
    history: bool = False,
) -> tuple[Counter[tuple[int, int]], dict[str, int]]:
    """`samples` seeded requests through `SpecDecoder.step` with K = 2 from the first step
    (masked draft model; `history`: with history drafts, which every request after the first
    gets, all requests sharing one prompt). `generate` would let `choose_k` decide, and it makes a draft-model
    request's first step plain (first token from the target's prefill alone): the law of the
    first two tokens would then see speculation only at the second."""
    from engine.config import EngineConfig
    from engine.torch_engine.decoder import SpecDecoder

    decoder = SpecDecoder(
        target_model=world["target"], draft_model=world["draft"], tokenizer=world["tokenizer"],
        config=EngineConfig(model="peaked-target", draft_model="peaked-draft", drafter="model", k=K, adaptive_k=False,
                            history_tokens=65536 if history else 0),
    )
    counts: Counter[tuple[int, int]] = Counter()
    totals = Counter[str]()
    random.seed(seed)  # history: unseeded requests (a seeded one drafts nothing from history)
    for i in range(samples):
        request = GenerationRequest(
            f"law-{i}", world["prompt"], dataclasses.replace(sampling, seed=None if history else seed + i),
            grammar=world[grammar],
        )
        seq = decoder.new_sequence(request)
        try:
            while not seq.finished and (grammar == "grammar" or len(seq.output_ids) < 2):
                decoder.step(seq, k=K)  # the span grammar: only its first two tokens are judged
        finally:
            seq.free()
        if grammar == "grammar":
            assert seq.finish_reason == "stop" and len(seq.output_ids) == 3, seq.output_ids
            assert seq.output_ids[2] in decoder.stop_token_ids
        counts[(seq.output_ids[0], seq.output_ids[1])] += 1
        totals["drafted"] += seq.stats.draft_tokens
        totals["accepted"] += seq.stats.accepted_tokens
        totals["forced_drafted"] += seq.stats.forced_draft_tokens
        totals["forced_accepted"] += seq.stats.forced_accepted_tokens
        totals["history_drafted"] += seq.stats.region_drafts.get("history", 0)
        totals["history_accepted"] += seq.stats.region_accepted.get("history", 0)
        totals["steps"] += seq.stats.steps
    return counts, dict(totals)


def _total_variation(a: dict[Any, float], b: dict[Any, float]) -> float:
    return 0.5 * sum(abs(a.get(c, 0.0) - b.get(c, 0.0)) for c in set(a) | set(b))


@pytest.mark.parametrize("sampling_name", list(SAMPLINGS))
def test_draft_and_target_are_peaked_and_clearly_different(law_world: dict[str, Any], sampling_name: str) -> None:
    """The premise of the law test: if q were close to p, a broken engine would pass it."""
    sampling, samples = SAMPLINGS[sampling_name]
    p, q = _first_two_law(law_world, law_world["target"], sampling), _first_two_law(law_world, law_world["draft"], sampling)
    assert _total_variation(p, q) > 0.5
    assert max(p.values()) > 0.1  # far from uniform over the 64 pairs (1/64 = 0.016)
    p1, q1 = Counter[int](), Counter[int]()
    for (t1, _), mass in p.items():
        p1[t1] += mass
    for (t1, _), mass in q.items():
        q1[t1] += mass
    # first-position acceptance probability sum(min(p, q)): drafts both accepted and rejected
    assert 0.2 < sum(min(p1[t], q1[t]) for t in p1) < 0.8
    assert sum(mass * samples >= 5 for mass in p.values()) >= 25  # enough testable cells


@pytest.mark.slow  # 1500-2000 requests through the decoder: 50 s of CPU (25-35 ms a request)
@pytest.mark.parametrize("sampling_name", list(SAMPLINGS))
def test_speculative_law_of_first_two_tokens_matches_plain_masked_sampling(
    law_world: dict[str, Any], sampling_name: str
) -> None:
    sampling, samples = SAMPLINGS[sampling_name]
    law = _first_two_law(law_world, law_world["target"], sampling)
    start = time.process_time()
    counts, totals = _speculative_counts(law_world, sampling, samples)
    pvalue = _chi_square_pvalue(counts, law)
    print(f"\n{sampling_name}: p-value {pvalue:.3g} over {samples} requests, {totals}, "
          f"{time.process_time() - start:.1f} s CPU")
    assert set(counts) <= set(law), "speculation emitted a pair plain masked sampling cannot"
    # the speculative path really ran: drafts accepted, drafts rejected (residual path taken)
    assert 0 < totals["accepted"] < totals["drafted"]
    assert totals["drafted"] - totals["accepted"] > samples // 10
    assert pvalue > PASS_P, (sampling_name, pvalue)


# ---- power: the same check fails on broken engines ---------------------------------------


def _patch_transform(
    monkeypatch: pytest.MonkeyPatch,
    *,
    draft: Callable[..., torch.Tensor] | None = None,
    target: Callable[..., torch.Tensor] | None = None,
) -> None:
    """Seam: `engine.torch_engine.transform.RequestTransform.probs`, the ONE transform T that the model
    drafter calls for q (inside `ModelDrafter.propose`) and the decoder calls for p (in
    `SpecDecoder._verify`). A broken engine is made by replacing T on one side only:
    `draft(real_probs, transform, logits, bitmask)` / `target(...)` return the row(s) to use."""
    import engine.drafters.model as drafter_module
    from engine.torch_engine.transform import RequestTransform

    real_probs = RequestTransform.probs
    real_propose = drafter_module.ModelDrafter.propose
    inside_drafter = [False]

    def propose(self: Any, ctx: Any, *, k: int, span: int = 0) -> Any:
        inside_drafter[0] = True
        try:
            return real_propose(self, ctx, k=k, span=span)
        finally:
            inside_drafter[0] = False

    def probs(self: Any, logits: torch.Tensor, bitmask: torch.Tensor | None) -> torch.Tensor:
        side = draft if inside_drafter[0] else target
        if side is None:
            return real_probs(self, logits, bitmask)
        return side(real_probs, self, logits, bitmask)

    monkeypatch.setattr(drafter_module.ModelDrafter, "propose", propose)
    monkeypatch.setattr(RequestTransform, "probs", probs)


def _break_unmasked_q(monkeypatch: pytest.MonkeyPatch) -> None:
    # Drafts are still drawn from the masked q (seam: the `sample_from_probs` name that
    # engine/drafters/model.py imports), but the q row handed to verification is the draft's
    # T without the grammar mask.
    import engine.drafters.model as drafter_module

    real_sample = drafter_module.sample_from_probs
    masked_rows: list[torch.Tensor] = []

    def unmasked_q(real: Any, transform: Any, logits: torch.Tensor, bitmask: torch.Tensor | None) -> torch.Tensor:
        masked_rows.append(real(transform, logits, bitmask))
        return real(transform, logits, None)

    def draw_from_masked(probs: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
        return real_sample(masked_rows.pop(), generator=generator)

    _patch_transform(monkeypatch, draft=unmasked_q)
    monkeypatch.setattr(drafter_module, "sample_from_probs", draw_from_masked)


def _break_recover_from_p(monkeypatch: pytest.MonkeyPatch) -> None:
    # Seam: sampler.rejection.residual_weights_, the recovered-token weights (p - q)+ inside
    # the rejection_sample that engine/torch_engine/decoder.py calls.
    import sampler.rejection

    monkeypatch.setattr(sampler.rejection, "residual_weights_", lambda target_row, draft_row: target_row)


def _break_wrong_residual(monkeypatch: pytest.MonkeyPatch) -> None:
    # Seam: as above; (q - p)+ instead of (p - q)+.
    import sampler.rejection

    monkeypatch.setattr(
        sampler.rejection, "residual_weights_",
        lambda target_row, draft_row: (draft_row - target_row).clamp_min_(0.0),
    )


def _break_uniform_target(monkeypatch: pytest.MonkeyPatch) -> None:
    # The target's T (verify step) fed constant logits: uniform over the mask.
    _patch_transform(monkeypatch, target=lambda real, transform, logits, bitmask: real(
        transform, torch.zeros_like(logits), bitmask))


def _break_target_filters(monkeypatch: pytest.MonkeyPatch) -> None:
    # The target's T drops top-k / top-p (keeps mask and temperature) while the drafter's T
    # keeps them: two transforms where there must be one.

    def unfiltered(real: Any, transform: Any, logits: torch.Tensor, bitmask: torch.Tensor | None) -> torch.Tensor:
        sampling = dataclasses.replace(transform.sampling, top_k=0, top_p=1.0)
        return real(dataclasses.replace(transform, sampling=sampling), logits, bitmask)

    _patch_transform(monkeypatch, target=unfiltered)


BROKEN: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], str]] = {  # name: (breaker, sampling)
    "unmasked_q": (_break_unmasked_q, "T1"),
    "recover_from_p": (_break_recover_from_p, "T1"),
    "wrong_residual": (_break_wrong_residual, "T1"),
    "uniform_target": (_break_uniform_target, "T1"),
    "target_ignores_top_k_top_p": (_break_target_filters, "T0.8-topk6-topp0.95"),
}


@pytest.mark.slow  # 500 requests through the decoder per variant: ~10 s of CPU each
@pytest.mark.parametrize("variant", list(BROKEN))
def test_law_check_catches_broken_engine(
    law_world: dict[str, Any], variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    breaker, sampling_name = BROKEN[variant]
    sampling = SAMPLINGS[sampling_name][0]
    law = _first_two_law(law_world, law_world["target"], sampling)
    breaker(monkeypatch)
    counts, totals = _speculative_counts(law_world, sampling, BROKEN_SAMPLES, seed=10_000)
    pvalue = _chi_square_pvalue(counts, law)
    print(f"\n{variant}: p-value {pvalue:.3g} over {BROKEN_SAMPLES} requests, {totals}")
    assert totals["drafted"] > 0
    assert pvalue < FAIL_P, (variant, pvalue)


# ---- grammar-forced spans: proposed for free, judged like any draft -----------------------

SPAN_SAMPLING = SamplingOptions(temperature=1.0, max_tokens=12)  # room for the span beyond K


def _break_span_q(monkeypatch: pytest.MonkeyPatch) -> None:
    # Span tokens are still proposed deterministically, but verification is told
    # q = 0.2 one-hot + 0.8 uniform there: a q the draw did not come from.
    from engine.torch_engine.transform import RequestTransform

    real_one_hot = RequestTransform.one_hot

    def blurred(self: Any, ids: list[int]) -> torch.Tensor:
        row = real_one_hot(self, ids)
        return 0.2 * row + 0.8 / row.shape[-1]

    monkeypatch.setattr(RequestTransform, "one_hot", blurred)


@pytest.mark.slow  # 1000 + 400 requests through the decoder, up to their second token
@pytest.mark.parametrize("broken", [False, True], ids=["correct", "span_q_not_one_hot"])
def test_forced_span_keeps_the_law(law_world: dict[str, Any], broken: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """K = 2 drafts of the model plus the forced " and the" span in one chain: the law of the
    first digit and the token after it (the span's first token, judged against p) is plain
    masked sampling's; a q that is not one-hot for the span's deterministic proposal is caught."""
    law = _first_two_law(law_world, law_world["target"], SPAN_SAMPLING, grammar="span_grammar")
    if broken:
        _break_span_q(monkeypatch)
    samples = 400 if broken else 1000
    counts, totals = _speculative_counts(law_world, SPAN_SAMPLING, samples, seed=20_000 if broken else 0,
                                         grammar="span_grammar")
    pvalue = _chi_square_pvalue(counts, law)
    print(f"\nspan {'broken' if broken else 'correct'}: p-value {pvalue:.3g} over {samples} requests, {totals}")
    # the spans really ran: forced drafts proposed, some accepted, some rejected
    assert 0 < totals["forced_accepted"] < totals["forced_drafted"]
    assert (pvalue < FAIL_P) if broken else (pvalue > PASS_P), pvalue


# ---- history drafts: an earlier output's continuation, q one-hot ---------------------------


@pytest.mark.slow  # 1000 + 1000 + 400 requests through the decoder
@pytest.mark.parametrize(("grammar", "broken"), [("grammar", False), ("span_grammar", False), ("grammar", True)],
                         ids=["correct", "correct_in_forced_text", "history_q_not_one_hot"])
def test_history_drafts_keep_the_law(
    law_world: dict[str, Any], grammar: str, broken: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every request after the first drafts what the previous one wrote (the shared prompt's
    tail is the history's context): a deterministic proposal, q one-hot; the law of the first
    two tokens is plain masked sampling's. Under the span grammar history replaces the forced
    text's canonical tokens where the model split " and the" otherwise, and runs past K. A q
    that is not one-hot there is caught. Seam for the broken engine: `RequestTransform.one_hot`."""
    import engine.drafters.history as history_module

    monkeypatch.setattr(history_module, "MIN_ACCEPTANCE", 0.0)  # the gates change speed, never the law: off
    sampling = SAMPLINGS["T1"][0] if grammar == "grammar" else SPAN_SAMPLING
    law = _first_two_law(law_world, law_world["target"], sampling, grammar=grammar)
    if broken:
        _break_span_q(monkeypatch)
    samples = 400 if broken else 1000
    counts, totals = _speculative_counts(law_world, sampling, samples, seed=30_000 if broken else 40_000,
                                         grammar=grammar, history=True)
    pvalue = _chi_square_pvalue(counts, law)
    print(f"\nhistory {grammar} {'broken' if broken else 'correct'}: p-value {pvalue:.3g} over {samples} requests, "
          f"{totals}")
    assert 0 < totals["history_accepted"] < totals["history_drafted"]  # history drafts ran, both ways
    assert (pvalue < FAIL_P) if broken else (pvalue > PASS_P), pvalue
