"""DiskGrammarCache: a compiled grammar survives a new compiler (a restart), keyed by backend and
spec; corrupt files recompile; the directory stays within its byte bound."""

from __future__ import annotations

import json
import pathlib

import pytest

from grammars import GrammarCompiler, GrammarSpec
from grammars.disk_cache import DiskGrammarCache

QWEN_VOCAB = 151_936
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string",
          "maxLength": 8}}, "required": ["n", "s"]}


def _accepts(compiled, text: str) -> bool:  # type: ignore[no-untyped-def]
    matcher = compiled.matcher()
    return bool(matcher.accept_text(text) and matcher.can_stop())


@pytest.mark.parametrize("backend", ["xgrammar", "llguidance"])
def test_restart_loads_the_same_grammar_from_disk(qwen_tokenizer, tmp_path: pathlib.Path,
                                                   backend: str) -> None:  # type: ignore[no-untyped-def]
    spec = GrammarSpec("json_schema", json.dumps(SCHEMA), ())
    first = GrammarCompiler(qwen_tokenizer, backend=backend, vocab_size=QWEN_VOCAB,  # type: ignore[arg-type]
                            disk_cache=DiskGrammarCache(tmp_path, max_bytes=1 << 24))
    compiled = first.compile(spec)
    assert not compiled.from_disk and len(list(tmp_path.glob("*.grammar"))) == 1
    # a restart: a new compiler (same tokenizer) with the same directory
    second = GrammarCompiler(qwen_tokenizer, backend=backend, vocab_size=QWEN_VOCAB,  # type: ignore[arg-type]
                             disk_cache=DiskGrammarCache(tmp_path, max_bytes=1 << 24))
    loaded = second.compile(spec)
    assert loaded.from_disk and loaded.backend == backend
    for text, ok in [('{"n": 1, "s": "abc"}', True), ('{"n": 1, "s": "abcdefghi"}', False),
                     ('{"s": "a", "n": 1}', False)]:
        assert _accepts(loaded, text) == _accepts(compiled, text) == ok
    # another spec never reads that file
    other = second.compile(GrammarSpec("json_schema", json.dumps({"type": "integer"}), ()))
    assert not other.from_disk
    # a corrupt file is a miss: recompiled, rewritten
    for path in tmp_path.glob("*.grammar"):
        path.write_bytes(path.read_bytes()[:-7] + b"garbage")
    third = GrammarCompiler(qwen_tokenizer, backend=backend, vocab_size=QWEN_VOCAB,  # type: ignore[arg-type]
                            disk_cache=DiskGrammarCache(tmp_path, max_bytes=1 << 24))
    again = third.compile(spec)
    assert not again.from_disk and _accepts(again, '{"n": 1, "s": "abc"}')
    assert third.disk_cache is not None and third.disk_cache.errors >= 1


def test_a_grammar_persisted_by_another_translation_is_not_read(
        qwen_tokenizer, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A grammar written before specgate changed how it translates a spec (json_fold) would
    otherwise be served from disk unchanged after an upgrade."""
    import grammars.compiler as compiler_module

    spec = GrammarSpec("json_schema", json.dumps(SCHEMA), ())
    monkeypatch.setattr(compiler_module, "TRANSLATION_VERSION", 1)
    GrammarCompiler(qwen_tokenizer, vocab_size=QWEN_VOCAB,
                    disk_cache=DiskGrammarCache(tmp_path, max_bytes=1 << 24)).compile(spec)
    monkeypatch.setattr(compiler_module, "TRANSLATION_VERSION", 2)
    upgraded = GrammarCompiler(qwen_tokenizer, vocab_size=QWEN_VOCAB,
                               disk_cache=DiskGrammarCache(tmp_path, max_bytes=1 << 24))
    assert not upgraded.compile(spec).from_disk


def test_directory_stays_within_its_bound(tmp_path: pathlib.Path) -> None:
    cache = DiskGrammarCache(tmp_path, max_bytes=3000)
    for index in range(10):
        cache.put(cache.key("spec", index), bytes([index]) * 1000)
    sizes = [p.stat().st_size for p in tmp_path.glob("*.grammar")]
    assert 0 < len(sizes) < 10 and sum(sizes) <= 3000
    assert cache.get(cache.key("spec", 9)) == bytes([9]) * 1000  # the newest survives
    assert cache.get(cache.key("spec", 0)) is None  # the oldest went first
    cache.put(cache.key("big"), b"x" * 5000)  # larger than the bound: not stored
    assert cache.get(cache.key("big")) is None
