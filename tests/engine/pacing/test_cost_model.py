"""engine.pacing.cost_model + engine.pacing.adaptive + engine.pacing.hardware: the measured costs decide K.

Curves used: the issue's AVX2-only EPYC (bf16 verify grows linearly: 200/365/520/.../1450 ms),
the bf16-native 2-core EPYC of DESIGN.md (5-token verify 1.39 plain steps), and a flat
GPU-like curve. Real measurement runs on the tiny float32 pair (milliseconds)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from engine.pacing.adaptive import AdaptiveK
from engine.pacing.cost_model import (
    ForwardCosts,
    cache_path,
    load_or_measure,
    measure_forward_costs,
)
from engine.pacing.hardware import choose_dtype, parse_cpuinfo
from engine.types import GenerationRequest, SamplingOptions

ZEN3_BF16 = ForwardCosts(target_s=(0.200, 0.365, 0.520, 0.675, 0.830), draft_s=0.080)  # n=4 interpolated
NATIVE_BF16 = ForwardCosts(target_s=(0.205, 0.225, 0.245, 0.265, 0.285), draft_s=0.079)
GPU_LIKE = ForwardCosts(target_s=(0.020, 0.0201, 0.0202, 0.0203, 0.0204), draft_s=0.004)


def test_verify_and_draft_ratios() -> None:
    assert NATIVE_BF16.k_max == 4
    assert NATIVE_BF16.verify_ratio(0) == 1.0
    assert NATIVE_BF16.verify_ratio(4) == pytest.approx(0.285 / 0.205)
    assert NATIVE_BF16.draft_ratio == pytest.approx(0.079 / 0.205)
    assert NATIVE_BF16.verify_ratio(6) == pytest.approx((0.285 + 2 * 0.020) / 0.205)  # linear beyond
    assert NATIVE_BF16.step_s(3) == pytest.approx(3 * 0.079 + 0.265)
    with_prefill = ForwardCosts(target_s=(0.2, 0.22), draft_s=0.08, draft_prefill_s=0.01)
    assert with_prefill.step_s(1, draft_forwards=1, draft_catch_up=300) == pytest.approx(0.08 + 3.0 + 0.22)


def test_linear_verify_curve_turns_draft_model_speculation_off() -> None:
    """The issue's machine: even 100% acceptance cannot pay for the draft model there."""
    assert not ZEN3_BF16.pays_at_all
    assert ZEN3_BF16.best_k(0.91) == (0, 1.0)
    assert ZEN3_BF16.free_drafts_pay()  # model-free drafts (c = 0) still can, at high acceptance
    ctl = AdaptiveK(k_max=4, costs=ZEN3_BF16)
    for _ in range(40):
        assert ctl.choose_k() == 0  # never, not even a periodic probe
        ctl.observe(k=0, num_drafts=0, num_accepted=0, draft_s=0.0, target_s=0.2)


def test_cheap_verify_picks_deep_k_and_follows_acceptance() -> None:
    assert NATIVE_BF16.pays_at_all and GPU_LIKE.pays_at_all
    assert GPU_LIKE.best_k(0.9)[0] == 4
    ctl = AdaptiveK(k_max=4, costs=NATIVE_BF16, prior_alpha=0.6)
    assert NATIVE_BF16.best_k(ctl.hazards())[0] > 0  # the prior alone says drafting pays, so
    assert ctl.choose_k() == 4  # the first step drafts at K_max (measuring every depth): no warm-up
    for _ in range(30):  # everything accepted: go deep
        ctl.observe(k=4, num_drafts=4, num_accepted=4, draft_s=0.3, target_s=0.28)
    assert ctl.choose_k() == 4
    for _ in range(30):  # nothing accepted: off
        ctl.observe(k=1, num_drafts=1, num_accepted=0, draft_s=0.08, target_s=0.22)
    assert ctl.choose_k() == 0
    for _ in range(ctl.probe_every):
        ctl.observe(k=0, num_drafts=0, num_accepted=0, draft_s=0.0, target_s=0.2)
    assert ctl.choose_k() == 1  # periodic re-probe of the acceptance


def test_draft_prefill_is_paid_only_after_as_much_plain_decoding() -> None:
    """Ski rental: a 400-token prompt costs the draft 400 x 5 ms = 2 s of prefill; decode plainly
    until 2 s of plain steps are spent, then draft (a short answer never pays the prefill)."""
    costs = ForwardCosts(target_s=NATIVE_BF16.target_s, draft_s=0.079, draft_prefill_s=0.005)
    ctl = AdaptiveK(k_max=4, costs=costs)
    ctl.observe(k=0, num_drafts=0, num_accepted=0, draft_s=0.0, target_s=3.0)  # the prefill step
    for _ in range(10):
        assert ctl.choose_k(catch_up_tokens=400) == 0
        ctl.observe(k=0, num_drafts=0, num_accepted=0, draft_s=0.0, target_s=0.205)
    assert ctl.choose_k(catch_up_tokens=400) > 0  # 10 x 0.205 s >= 2 s
    assert AdaptiveK(k_max=4, costs=costs, free_drafts=True).choose_k(catch_up_tokens=400) > 0  # no prefill


def test_predicted_speedup_matches_leviathan_formula() -> None:
    from sampler import expected_tokens_per_step

    k, alpha = 3, 0.75
    want = expected_tokens_per_step(alpha, k) * NATIVE_BF16.plain_s / NATIVE_BF16.step_s(k)
    assert NATIVE_BF16.speedup(alpha, k) == pytest.approx(want)


def test_round_trip_and_describe() -> None:
    again = ForwardCosts.from_dict(json.loads(json.dumps(NATIVE_BF16.as_dict())))
    assert again == NATIVE_BF16
    text = "\n".join(ZEN3_BF16.describe())
    assert "never pays" in text and "1: 200" in text
    with pytest.raises(ValueError):
        ForwardCosts(target_s=())


def test_measured_curve_is_made_non_decreasing() -> None:
    from engine.pacing.cost_model import monotone

    assert monotone([0.69, 0.62, 0.63, 0.53, 0.54]) == pytest.approx([0.602] * 5)
    assert monotone([0.2, 0.365, 0.52]) == [0.2, 0.365, 0.52]
    assert monotone([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]


def test_measure_on_a_real_model(tiny_pair: Any) -> None:
    target, draft, _ = tiny_pair
    costs = measure_forward_costs(target, draft, k_max=3, context=16, repeats=1)
    assert costs.k_max == 3 and len(costs.target_s) == 4
    assert all(t > 0 for t in costs.target_s) and list(costs.target_s) == sorted(costs.target_s)
    assert costs.draft_s is not None and costs.draft_s > 0
    assert costs.draft_prefill_s is not None and costs.draft_prefill_s > 0 and costs.draft_prefill_fixed_s >= 0
    assert costs.dtype == "float32" and costs.threads >= 1 and costs.kernel_path.startswith("aten-")


def test_cache_reused_per_models_and_k_max(tiny_pair: Any, tmp_path: pathlib.Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGATE_COSTS_DIR", str(tmp_path))
    target, draft, _ = tiny_pair
    first = load_or_measure(target, draft, k_max=2, context=8, repeats=1)
    assert not first.cached and len(list(tmp_path.glob("*.json"))) == 1
    second = load_or_measure(target, draft, k_max=1, context=8, repeats=1)
    assert second.cached and second.target_s == first.target_s
    wider = load_or_measure(target, draft, k_max=3, context=8, repeats=1)  # not covered: re-measured
    assert not wider.cached and wider.k_max == 3
    no_draft = load_or_measure(target, None, k_max=1, context=8, repeats=1)  # another key
    assert not no_draft.cached and no_draft.draft_s is None
    assert len(list(tmp_path.glob("*.json"))) == 2
    assert cache_path("abc").parent == tmp_path


def test_costs_measured_on_a_busy_machine_are_retaken_once_it_is_quieter(
        tiny_pair: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.pacing.cost_model as cost_model

    monkeypatch.setenv("SPECGATE_COSTS_DIR", str(tmp_path))
    target, draft, _ = tiny_pair
    monkeypatch.setattr(cost_model, "load_per_core", lambda: 3.0)  # other jobs on every core
    busy = load_or_measure(target, draft, k_max=1, context=8, repeats=1)
    assert busy.load_per_core == 3.0
    assert load_or_measure(target, draft, k_max=1, context=8, repeats=1).cached  # still busy: reused
    monkeypatch.setattr(cost_model, "load_per_core", lambda: 0.2)
    quiet = load_or_measure(target, draft, k_max=1, context=8, repeats=1)
    assert not quiet.cached and quiet.load_per_core == 0.2  # retaken, and stored
    assert load_or_measure(target, draft, k_max=1, context=8, repeats=1).cached


def test_dtype_rule_from_cpu_flags() -> None:
    zen3 = parse_cpuinfo("model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse avx avx2 fma f16c\n", cores=2)
    zen4 = parse_cpuinfo("model name\t: AMD EPYC 9B14\nflags\t\t: avx2 avx512f avx512_bf16 avx512_vnni\n", cores=2)
    arm = parse_cpuinfo("Features\t: fp asimd bf16 i8mm\nCPU part\t: 0xd4f\n", cores=4)
    assert zen3.model == "AMD EPYC 7B13" and not zen3.native_bf16 and zen3.key_flags == ["avx2", "fma"]
    assert choose_dtype("auto", info=zen3)[0] == "float32"
    assert choose_dtype("auto", info=zen4)[0] == "bfloat16"
    assert choose_dtype("auto", info=arm)[0] == "bfloat16"
    assert choose_dtype("bfloat16", info=zen3) == ("bfloat16", "set explicitly")
    assert zen3.fingerprint() != zen4.fingerprint()


def _greedy(decoder: Any, prompt: list[int], grammar: Any = None) -> Any:
    return decoder.generate(GenerationRequest("r", prompt, SamplingOptions(temperature=0.0, max_tokens=20),
                                              grammar=grammar))


@pytest.mark.parametrize("costs", [NATIVE_BF16, GPU_LIKE, ZEN3_BF16], ids=["native-bf16", "gpu", "zen3-bf16"])
def test_adaptive_decoder_greedy_equals_plain(costs: ForwardCosts, make_decoder: Any, tiny_pair: Any,
                                             compile_body: Any) -> None:
    """float32 pair: adaptive K with any cost curve leaves greedy output token for token."""
    body = {"structured_outputs": {"regex": "[a-z]{1,8}( [a-z]{1,8}){5}"}}
    prompt = list(tiny_pair[2].encode("Name some animals: cat dog emu cat dog emu"))
    plain = _greedy(make_decoder(drafter="none", k=0), prompt, compile_body(body))
    spec = _greedy(make_decoder(drafter="model", k=4, adaptive_k=True, costs=costs), prompt, compile_body(body))
    assert spec.output_ids == plain.output_ids
    if costs.pays_at_all:
        assert spec.stats.draft_tokens > 0
    else:  # speculation off: the draft model never runs
        assert spec.stats.draft_tokens == 0 and spec.stats.draft_forwards == 0


def test_first_token_comes_from_the_target_prefill_alone(make_decoder: Any, tiny_pair: Any) -> None:
    decoder = make_decoder(drafter="model", k=4, adaptive_k=False)
    seq = decoder.new_sequence(GenerationRequest("r", list(tiny_pair[2].encode("hello there")),
                                                 SamplingOptions(temperature=0.0, max_tokens=8)))
    committed = decoder.step(seq)
    assert len(committed) == 1 and seq.draft_kv is not None and len(seq.draft_kv) == 0  # draft not run yet
    decoder.step(seq)
    assert len(seq.draft_kv) > 0 and seq.stats.draft_tokens > 0  # from the second step on it drafts
    seq.free()


def test_recorded_output_lengths_buy_the_draft_prefill_at_once() -> None:
    """Learning-augmented rental: where the record of past outputs says the remaining tokens
    save more than the 2 s catch-up, the draft prefills at the first decode step, and where
    it says they save less, not while the record covers the request; where even running to
    max_tokens cannot save it, the request never drafts; else the rental."""
    costs = ForwardCosts(target_s=NATIVE_BF16.target_s, draft_s=0.079, draft_prefill_s=0.005)

    from engine.pacing.acceptance_model import DepthAcceptance

    pair = DepthAcceptance(depth=4, prior_alpha=0.6)  # the engine has seen this pair draft
    for _ in range(5):
        pair.observe(num_drafts=4, num_accepted=3)

    def fresh() -> AdaptiveK:
        ctl = AdaptiveK(k_max=4, costs=costs, shared=pair)
        ctl.observe(k=0, num_drafts=0, num_accepted=0, draft_s=0.0, target_s=3.0)  # the prefill step
        return ctl

    best_k, speed = costs.best_k(fresh().hazards(), k_max=4)
    saving = costs.plain_s * (1 - 1 / speed)  # seconds saved per drafted token
    pays = 2.0 / saving  # remaining tokens at which the catch-up pays
    assert best_k > 0
    assert fresh().choose_k(catch_up_tokens=400, room=1000, expected_remaining=pays * 1.1) > 0
    short_record = fresh()  # the record says the rest is too short: no prefill, however long it rents ...
    for _ in range(30):
        assert short_record.choose_k(catch_up_tokens=400, room=1000, expected_remaining=pays * 0.9) == 0
        short_record.observe(k=0, num_drafts=0, num_accepted=0, draft_s=0.0, target_s=0.205)
    # ... until the request runs past every recorded output: then a fresh rental (2 s / 0.205 s)
    for _ in range(int(2.0 / costs.plain_s)):
        assert short_record.choose_k(catch_up_tokens=400, room=1000, expected_remaining=None) == 0
        short_record.observe(k=0, num_drafts=0, num_accepted=0, draft_s=0.0, target_s=0.205)
    assert short_record.choose_k(catch_up_tokens=400, room=1000, expected_remaining=None) > 0
    assert fresh().choose_k(catch_up_tokens=400, room=1000) == 0  # nothing recorded: rental
    unknown_pair = AdaptiveK(k_max=4, costs=costs)  # no acceptance observed: the saving is a guess
    unknown_pair.observe(k=0, num_drafts=0, num_accepted=0, draft_s=0.0, target_s=3.0)
    assert unknown_pair.choose_k(catch_up_tokens=400, room=1000, expected_remaining=pays * 10) == 0
    short = fresh()  # max_tokens leaves too little room: never drafts, however long it rents
    for _ in range(30):
        assert short.choose_k(catch_up_tokens=400, room=int(pays * 0.9), expected_remaining=None) == 0
        short.observe(k=0, num_drafts=0, num_accepted=0, draft_s=0.0, target_s=0.205)
    bought = fresh()
    bought.observe(k=4, num_drafts=4, num_accepted=4, draft_s=0.3, target_s=0.25)
    assert bought.drafted and bought.choose_k(catch_up_tokens=3, room=1000) > 0  # the prefill is sunk


def test_draft_prefill_is_priced_as_a_line() -> None:
    costs = ForwardCosts(target_s=(0.2, 0.22), draft_s=0.08, draft_prefill_s=0.002, draft_prefill_fixed_s=0.06)
    assert costs.draft_prefill_cost_s(0) == 0.0
    assert costs.draft_prefill_cost_s(256) == pytest.approx(0.06 + 0.512)
    assert costs.step_s(1, draft_catch_up=10) == pytest.approx(0.08 + 0.06 + 0.02 + 0.22)
    assert ForwardCosts(target_s=(0.2,)).draft_prefill_cost_s(100) == 0.0  # no draft model


def test_decoder_learns_output_lengths_and_drafts_earlier_on_the_next_request(
        make_decoder: Any, tiny_pair: Any, compile_body: Any) -> None:
    """The first request of a grammar rents plain steps before paying the draft's prefill; once
    its length is on record, the next request with that grammar drafts from its first decode
    step. Greedy output stays token for token that of plain decoding."""
    body = {"structured_outputs": {"regex": "[a-z]{1,8}( [a-z]{1,8}){7}"}}
    prompt = list(tiny_pair[2].encode("Name some animals: cat dog emu cat dog emu"))
    plain_s = 0.2  # flat verify and a near-free draft: drafting pays even at the random pair's acceptance
    costs = ForwardCosts(target_s=(plain_s,) * 5, draft_s=0.002,
                         draft_prefill_s=4 * plain_s / len(prompt))  # the catch-up costs ~4 plain steps
    decoder = make_decoder(drafter="model", k=4, adaptive_k=True, costs=costs,
                           history_tokens=0)  # history would draft the repeated request at once
    plain = _greedy(make_decoder(drafter="none", k=0), prompt, compile_body(body))

    def plain_steps_before_drafting() -> tuple[int, Any]:
        seq = decoder.new_sequence(GenerationRequest("r", prompt, SamplingOptions(temperature=0.0, max_tokens=20),
                                                     grammar=compile_body(body)))
        steps = 0
        while not seq.finished:
            decoder.step(seq)
            if seq.stats.draft_tokens == 0:
                steps += 1
        return steps, seq

    first, seq1 = plain_steps_before_drafting()
    second, seq2 = plain_steps_before_drafting()
    assert seq1.output_ids == plain.output_ids == seq2.output_ids
    assert first >= 4 and seq1.stats.draft_tokens > 0  # rented, then drafted
    assert second == 1  # only the prefill step: the record said the prefill pays
    assert decoder.output_lengths.count(("kind", "regex")) == 2
