"""benchmarks.mask_cost: a cold and a warm walk time the same positions of the same outputs; schema-aware
SQL also times each position's first fill (scope tables cleared) at those positions."""

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


def test_schema_aware_sql_times_first_fills_at_the_same_positions(qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    from benchmarks.mask_cost import sql_cases
    from grammars import GrammarCompiler

    compiler = GrammarCompiler(qwen_tokenizer, backend="xgrammar", vocab_size=151_936)
    stats = measure(compiler, sql_cases(2))
    assert stats["cases"] == 2
    assert len(stats["cold"]) == len(stats["inner"]) == len(stats["fill"]) > 20
    assert measure(compiler, sql_cases(1), warm=True)["cold"] == []  # a warm walk has no first fills
