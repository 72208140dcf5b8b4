"""benchmarks.micro.mask_cost: a cold and a warm walk time the same positions of the same outputs; schema-aware
SQL also times each position's first fill (scope tables cleared) at those positions."""

from __future__ import annotations

from benchmarks.micro.mask_cost import json_cases, measure


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
    from benchmarks.micro.mask_cost import sql_cases
    from grammars import GrammarCompiler

    compiler = GrammarCompiler(qwen_tokenizer, backend="xgrammar", vocab_size=151_936)
    stats = measure(compiler, sql_cases(2))
    assert stats["cases"] == 2
    assert len(stats["cold"]) == len(stats["inner"]) == len(stats["fill"]) > 20
    assert measure(compiler, sql_cases(1), warm=True)["cold"] == []  # a warm walk has no first fills


def test_engine_walk_fills_the_rows_the_torch_engine_fills(qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    """One drafter row per draft, written into the verify bitmask, then one verify per step
    that fills only the row after its last draft (the last step's may be the drafter's), then
    a bonus token; the walk ends with the whole output accepted. Refilling every row instead
    costs K+1 verify fills a step."""
    import math

    from benchmarks.micro.mask_cost import Evictor, K, engine_walk
    from grammars import GrammarCompiler, spec_from_request

    compiler = GrammarCompiler(qwen_tokenizer, backend="auto", vocab_size=151_936)
    body, text = json_cases(1)[0]
    tokens = compiler.encode(text)
    compiled = compiler.compile(spec_from_request(body))
    clock = __import__("time").perf_counter_ns
    matcher = compiled.matcher()
    drafted, verified = engine_walk(matcher, tokens, compiler.allocate_bitmask(K + 1), clock=clock, evict=Evictor(1))
    steps = math.ceil(len(tokens) / (K + 1))  # K drafts and a bonus token a step
    assert len(drafted) + steps - 1 <= len(tokens) <= len(drafted) + steps  # the last bonus optional
    assert len(verified) == steps
    assert matcher.fill_times.count == len(drafted)  # the matcher's own counts agree
    assert steps - 1 <= matcher.fill_masks_times.count <= steps  # the last step may end the grammar
    assert matcher.num_accepted == len(tokens) and matcher.can_stop()
    refill = compiled.matcher()
    engine_walk(refill, tokens, compiler.allocate_bitmask(K + 1), clock=clock, evict=Evictor(1), drafter_rows=False)
    assert refill.fill_masks_times.count >= len(drafted) + steps - 1
    stats = measure(compiler, [(body, text)])
    assert (len(stats["draft"]), len(stats["verify"])) == (len(drafted), steps)
    assert stats["engine_tokens"] == len(tokens)  # walked twice: drafter rows in the verify mask, and refilled
    assert stats["engine_ns_direct"] > 0 and stats["engine_ns_refill"] > 0
