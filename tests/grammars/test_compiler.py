"""GrammarCompiler: kinds per backend, errors, cache accounting and bound, timeout, async."""

from __future__ import annotations

import asyncio

import pytest

from grammars import GrammarError, GrammarSpec, spec_from_request

SQL_DDL_SPEC = spec_from_request({"response_format": {"type": "sql", "sql": {"schema": {
    "tables": {f"table_{i}": [f"col_{i}_{j}" for j in range(8)] for i in range(30)}}}}})


def test_every_kind_compiles_on_xgrammar(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    bodies = [
        {"response_format": {"type": "json_object"}},
        {"guided_json": {"type": "array", "items": {"type": "number"}}},
        {"guided_regex": "[0-9]+"},
        {"guided_choice": ["a", "b"]},
        {"guided_grammar": 'root ::= "x" [0-9]+'},
        {"guided_grammar": 'start: "x" NUM\nNUM: /[0-9]+/'},
        {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"},
        {"response_format": {"type": "sql", "sql": {}}},
    ]
    kinds = set()
    for body in bodies:
        spec = spec_from_request(body)
        compiled = xgr_compiler.compile(spec)
        assert compiled.memory_bytes > 0 and compiled.backend == "xgrammar"
        kinds.add(spec.kind)
    assert kinds == xgr_compiler.supported_kinds


@pytest.mark.parametrize("kind", ["json_object", "ebnf", "lark", "tools", "sql"])
def test_outlines_refuses_unsupported_kinds_by_name(outlines_compiler, kind: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(GrammarError, match=f"'{kind}' is not supported by the outlines"):
        outlines_compiler.compile(GrammarSpec(kind, "{}"))


def test_bad_grammars_are_grammar_errors(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(GrammarError, match="cannot compile ebnf"):
        xgr_compiler.compile(GrammarSpec("ebnf", "root ::= undefined_rule\n"))
    with pytest.raises(GrammarError, match="cannot compile lark"):
        xgr_compiler.compile(GrammarSpec("lark", "start: (\n"))
    with pytest.raises(GrammarError, match="remote \\$ref"):
        xgr_compiler.compile(GrammarSpec("json_schema", '{"$ref": "http://example.com/x"}'))


def test_cache_hits_misses_and_byte_bound(xgr_compiler, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    xgr_compiler.clear_cache()
    start = xgr_compiler.cache_info()
    spec_a = GrammarSpec("regex", "a[0-9]{1,4}")
    first = xgr_compiler.compile(spec_a)
    assert xgr_compiler.compile(GrammarSpec("regex", "a[0-9]{1,4}")) is first
    info = xgr_compiler.cache_info()
    assert (info.hits - start.hits, info.misses - start.misses) == (1, 1)
    assert info.entries == 1 and info.bytes == first.memory_bytes
    # bound: room for ~2 regex grammars; inserting more evicts the least recently used
    monkeypatch.setattr(xgr_compiler, "cache_bytes", int(first.memory_bytes * 2.5))
    second = xgr_compiler.compile(GrammarSpec("regex", "b[0-9]{1,4}"))
    xgr_compiler.compile(spec_a)  # touch a: b becomes least recent
    xgr_compiler.compile(GrammarSpec("regex", "c[0-9]{1,4}"))
    info = xgr_compiler.cache_info()
    assert info.bytes <= xgr_compiler.cache_bytes and info.entries == 2
    assert xgr_compiler.compile(spec_a) is first
    assert xgr_compiler.compile(GrammarSpec("regex", "b[0-9]{1,4}")) is not second
    xgr_compiler.clear_cache()


def test_cache_key_includes_tokenizer_fingerprint(xgr_compiler, smollm_tokenizer) -> None:  # type: ignore[no-untyped-def]
    from grammars.compiler import tokenizer_fingerprint

    assert tokenizer_fingerprint(smollm_tokenizer, 49152, [0]) != xgr_compiler.fingerprint
    assert xgr_compiler.fingerprint in xgr_compiler._key(GrammarSpec("regex", "a"))


def test_compile_timeout(xgr_compiler, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(xgr_compiler, "compile_timeout_s", 1e-4)
    with pytest.raises(GrammarError, match="exceeded"):
        xgr_compiler.compile(SQL_DDL_SPEC)


async def test_compile_async_keeps_loop_free(xgr_compiler) -> None:  # type: ignore[no-untyped-def]
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    spec = spec_from_request({"response_format": {"type": "sql", "sql": {"schema": {
        "tables": {"async_t": ["a", "b"]}}}}})
    compiled = await xgr_compiler.compile_async(spec)
    task.cancel()
    assert compiled.matcher().accept_text("SELECT a FROM async_t")
    assert ticks >= 3
