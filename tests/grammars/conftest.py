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


@pytest.fixture(params=["xgrammar", "outlines"])
def any_compiler(request):  # type: ignore[no-untyped-def]
    """Both backends, for the kinds both support (json_schema, regex, choice)."""
    return request.getfixturevalue("xgr_compiler" if request.param == "xgrammar"
                                   else "outlines_compiler")
