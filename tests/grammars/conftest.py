"""Fixtures for grammars tests: one compiler per backend per session (TokenizerInfo ≈1 s)."""

from __future__ import annotations

import pytest

QWEN_VOCAB = 151_936


@pytest.fixture(scope="session")
def xgr_compiler(qwen_tokenizer):  # type: ignore[no-untyped-def]
    from grammars import GrammarCompiler

    return GrammarCompiler(qwen_tokenizer, vocab_size=QWEN_VOCAB)


@pytest.fixture(scope="session")
def outlines_compiler(qwen_tokenizer):  # type: ignore[no-untyped-def]
    from grammars import GrammarCompiler

    return GrammarCompiler(qwen_tokenizer, backend="outlines", vocab_size=QWEN_VOCAB)


@pytest.fixture(scope="session")
def llg_compiler(qwen_tokenizer):  # type: ignore[no-untyped-def]
    from grammars import GrammarCompiler

    return GrammarCompiler(qwen_tokenizer, backend="llguidance", vocab_size=QWEN_VOCAB)


@pytest.fixture(scope="session")
def auto_compiler(qwen_tokenizer):  # type: ignore[no-untyped-def]
    from grammars import GrammarCompiler

    return GrammarCompiler(qwen_tokenizer, backend="auto", vocab_size=QWEN_VOCAB)


_COMPILERS = {"xgrammar": "xgr_compiler", "outlines": "outlines_compiler",
              "llguidance": "llg_compiler", "auto": "auto_compiler"}


@pytest.fixture(params=list(_COMPILERS))
def any_compiler(request):  # type: ignore[no-untyped-def]
    """Every backend (and auto), for the kinds all support (json_schema, regex, choice)."""
    return request.getfixturevalue(_COMPILERS[request.param])
