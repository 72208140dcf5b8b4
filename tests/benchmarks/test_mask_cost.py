"""benchmarks.mask_cost: a cold and a warm walk time the same positions of the same outputs."""

from __future__ import annotations

from benchmarks.mask_cost import json_cases, measure


def test_warm_and_cold_walks_time_the_same_positions(qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    from grammars import GrammarCompiler

    auto_compiler = GrammarCompiler(qwen_tokenizer, backend="auto", vocab_size=151_936)
    cases = json_cases(3)
    cold = measure(auto_compiler, cases)
    warm = measure(auto_compiler, cases, warm=True)
    assert cold["cases"] == warm["cases"] >= 2
    assert len(cold["fill"]) == len(warm["fill"]) > 20
    assert len(cold["multi"]) == len(warm["multi"])
    assert all(ns > 0 for ns in warm["fill"])
