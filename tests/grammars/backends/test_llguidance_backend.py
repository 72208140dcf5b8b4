"""llguidance backend and the auto choice: policy parity with xgrammar, whitespace cap,
exact rollback, refusals, fallback to xgrammar, shared in-flight compiles."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from grammars import GrammarError, GrammarSpec
from grammars.spec import canonical_json


def _spec(schema: Any) -> GrammarSpec:
    return GrammarSpec("json_schema", canonical_json(schema), (("strict", False),))


def _accepts(compiled: Any, text: str) -> bool:
    matcher = compiled.matcher()
    return bool(matcher.accept_text(text) and matcher.can_stop())


PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
                                           "age": {"type": "integer", "minimum": 0},
                                           "tags": {"type": "array"}},
          "required": ["name"]}


@pytest.mark.parametrize("text, ok", [
    ('{"name": "Ann"}', True),
    ('{"name": "Ann", "age": 3, "tags": [1, "x", {}]}', True),  # memberless array: any items
    ('{"name": "Annabel"}', False),  # maxLength
    ('{"name": "Ann", "age": -1}', False),  # minimum
    ('{"name": "Ann", "zip": 1}', False),  # unlisted property (policy rule 1)
    ('{"age": 3}', False),  # required
])
def test_json_policy_matches_xgrammar(llg_compiler, xgr_compiler, text: str, ok: bool) -> None:  # type: ignore[no-untyped-def]
    assert _accepts(llg_compiler.compile(_spec(PERSON)), text) is ok
    assert _accepts(xgr_compiler.compile(_spec(PERSON)), text) is ok


def test_whitespace_runs_are_bounded(llg_compiler) -> None:  # type: ignore[no-untyped-def]
    compiled = llg_compiler.compile(_spec(PERSON))
    limit = llg_compiler.max_whitespace
    assert _accepts(compiled, "{" + " " * limit + '"name": "A"}')
    assert not _accepts(compiled, "{" + " " * (limit + 1) + '"name": "A"}')
    assert not _accepts(compiled, '{"name":' + "\n" * (limit + 5) + '"A"}')
    # the mask agrees: after a full run no whitespace-leading token is allowed
    matcher = compiled.matcher()
    assert matcher.accept_text("{" + " " * limit)
    bitmask = llg_compiler.allocate_bitmask(1)
    matcher.fill_mask(bitmask, 0)
    space = llg_compiler.encode(" ")[0]
    quote = llg_compiler.encode('"')[0]
    assert not _allowed(bitmask, space) and _allowed(bitmask, quote)


def _allowed(bitmask: Any, token: int) -> bool:
    return bool((int(bitmask[0, token // 32]) >> (token % 32)) & 1)


def test_mask_agrees_with_accept_and_rollback_is_exact(llg_compiler) -> None:  # type: ignore[no-untyped-def]
    compiled = llg_compiler.compile(_spec(PERSON))
    text = '{"name": "Bo", "age": 41, "tags": ["a"]}'
    tokens = llg_compiler.encode(text)
    matcher = compiled.matcher()
    bitmask = llg_compiler.allocate_bitmask(len(tokens) + 1)
    rows = matcher.fill_masks(bitmask, tokens)
    assert rows == len(tokens) + 1 and matcher.num_accepted == 0
    for index, token in enumerate(tokens):
        row = bitmask[index : index + 1]
        assert _allowed(row, token)
        assert matcher.accept_token(token)
    assert matcher.can_stop()
    stop = llg_compiler.stop_token_ids[0]
    last = bitmask[len(tokens) : len(tokens) + 1]
    assert _allowed(last, stop)
    matcher.rollback(len(tokens))
    assert not matcher.accept_token(llg_compiler.encode("}")[0])  # refused: state unchanged
    assert matcher.num_accepted == 0 and matcher.accept_text(text) and matcher.accept_token(stop)
    assert matcher.is_terminated()


@pytest.mark.parametrize("schema, reason", [
    (False, "admits no value"),
    ({"$ref": "https://example.com/s.json"}, "remote $ref"),
    ({"type": "string", "pattern": "(("}, "unclosed group"),
])
def test_refusals_name_the_reason(llg_compiler, schema: Any, reason: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(GrammarError, match="json_schema|schema|remote") as info:
        llg_compiler.compile(_spec(schema))
    assert reason in info.value.message


def test_required_names_count_as_listed(llg_compiler) -> None:  # type: ignore[no-untyped-def]
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]}
    compiled = llg_compiler.compile(_spec(schema))
    assert _accepts(compiled, '{"a": 1, "b": [true]}')
    assert not _accepts(compiled, '{"a": 1}')


def test_auto_picks_llguidance_for_json_and_xgrammar_for_the_rest(auto_compiler) -> None:  # type: ignore[no-untyped-def]
    assert auto_compiler.compile(_spec(PERSON)).backend == "llguidance"
    assert auto_compiler.compile(GrammarSpec("regex", "[a-z]{3}")).backend == "xgrammar"
    assert auto_compiler.backends_for(GrammarSpec("sql", json.dumps({"schema": None}))) == (
        "xgrammar",)
    assert "sql" in auto_compiler.supported_kinds and "tools" in auto_compiler.supported_kinds


def test_auto_falls_back_to_xgrammar_when_llguidance_refuses(auto_compiler, llg_compiler) -> None:  # type: ignore[no-untyped-def]
    # overlapping patternProperties: llguidance refuses them, xgrammar compiles them
    schema = {"type": "object", "patternProperties": {"^a": {"type": "integer"},
                                                      "b$": {"type": "integer"}}}
    with pytest.raises(GrammarError):
        llg_compiler.compile(_spec(schema))
    compiled = auto_compiler.compile(_spec(schema))
    assert compiled.backend == "xgrammar"
    assert _accepts(compiled, '{"a": 1}')


def test_identical_compiles_in_flight_are_shared(qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    from grammars import GrammarCompiler

    compiler = GrammarCompiler(qwen_tokenizer, backend="llguidance", vocab_size=151_936)
    calls = []
    backend = compiler._get_backend("llguidance")
    original = backend.compile
    gate = threading.Event()

    def slow_compile(spec: GrammarSpec) -> Any:
        calls.append(spec)
        gate.wait(5)
        return original(spec)

    backend.compile = slow_compile
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(compiler.compile(_spec(PERSON))))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    while not calls:
        threading.Event().wait(0.01)
    threading.Event().wait(0.1)
    gate.set()
    for thread in threads:
        thread.join(10)
    assert len(calls) == 1 and len(results) == 3
    assert all(result is results[0] for result in results)
