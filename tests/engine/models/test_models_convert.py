"""Chat-template checks and fixes applied at conversion (the GGUF load itself is e2e)."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from engine.models import REGISTRY, PullError
from engine.models.convert import check_chat_template, fix_chat_template


def test_qwen_template_renders_tools(qwen_tokenizer: Any) -> None:
    check_chat_template(qwen_tokenizer, needs_tools=True, name="qwen")


def test_template_ignoring_tools_is_refused(smollm_tokenizer: Any) -> None:
    check_chat_template(smollm_tokenizer, needs_tools=False, name="smollm2")
    with pytest.raises(PullError, match="smollm2: the chat template ignores `tools`"):
        check_chat_template(smollm_tokenizer, needs_tools=True, name="smollm2")


def test_missing_template_is_refused(qwen_tokenizer: Any) -> None:
    class NoTemplate:
        chat_template = None

    with pytest.raises(PullError, match="carries no chat template"):
        check_chat_template(NoTemplate(), needs_tools=False, name="x")


def test_qwen_1_5b_brace_fix_restores_the_shared_template(shared_dir: pathlib.Path) -> None:
    shared = (shared_dir / "tokenizers" / "qwen2.5" / "chat_template.jinja").read_text()
    fixes = REGISTRY["qwen2.5-coder-1.5b"].chat_template_fixes
    (wrong, right), = fixes
    as_in_gguf = shared.replace(right, wrong)  # the 1.5B GGUF's doubled braces
    assert as_in_gguf != shared
    assert fix_chat_template(as_in_gguf, fixes, name="qwen2.5-coder-1.5b") == shared
    with pytest.raises(PullError, match="found 0"):  # already fixed: the GGUF changed
        fix_chat_template(shared, fixes, name="qwen2.5-coder-1.5b")
