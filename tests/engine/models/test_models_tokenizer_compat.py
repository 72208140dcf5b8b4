"""Draft/target tokenizer compatibility: same family passes, mixed families fail with ids named."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from engine.models import TokenizerMismatchError, check_tokenizer_compat


def test_qwen_vs_qwen_passes(qwen_tokenizer: Any, shared_dir: pathlib.Path) -> None:
    from transformers import AutoTokenizer

    other = AutoTokenizer.from_pretrained(str(shared_dir / "tokenizers" / "qwen2.5"))
    check_tokenizer_compat(qwen_tokenizer, other)


def test_qwen_vs_smollm_fails_naming_ids(qwen_tokenizer: Any, smollm_tokenizer: Any) -> None:
    with pytest.raises(TokenizerMismatchError) as info:
        check_tokenizer_compat(qwen_tokenizer, smollm_tokenizer)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    # id 0 is "!" in Qwen and "<|endoftext|>" in SmolLM2
    assert "id 0: target '!' vs draft '<|endoftext|>'" in message
    assert "eos_token_id differs" in message
    assert "and " in message and "more" in message  # the count of further differing ids


class FakeTokenizer:
    """The slice of the HF tokenizer API the check uses, over a small vocabulary."""

    def __init__(self, vocab: dict[str, int], *, eos: int = 0, merge_ab: bool = True) -> None:
        self.vocab, self.eos_token_id, self.merge_ab = vocab, eos, merge_ab
        self.bos_token_id = self.pad_token_id = None

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def convert_ids_to_tokens(self, token_id: int) -> str:
        return {i: t for t, i in self.vocab.items()}[token_id]

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = []
        for char in text:
            ids.append(self.vocab.get(char, 1))
        if self.merge_ab:
            ids = [i if i != self.vocab["a"] else self.vocab["ab"] for i in ids]
        return ids


VOCAB = {"<eos>": 0, "<unk>": 1, "a": 2, "b": 3, "ab": 4, "c": 5}


def test_single_swapped_token_is_named() -> None:
    draft_vocab = dict(VOCAB)
    draft_vocab["c"], draft_vocab["b"] = 3, 5
    with pytest.raises(TokenizerMismatchError,
                       match=r"differ at 2 ids .*id 3: target 'b' vs draft 'c', id 5: target 'c'"):
        check_tokenizer_compat(FakeTokenizer(VOCAB), FakeTokenizer(draft_vocab))


def test_extra_token_in_draft_is_named() -> None:
    with pytest.raises(TokenizerMismatchError, match=r"id 6: target None vs draft 'd'"):
        check_tokenizer_compat(FakeTokenizer(VOCAB), FakeTokenizer({**VOCAB, "d": 6}))


def test_eos_mismatch_is_named() -> None:
    with pytest.raises(TokenizerMismatchError, match=r"eos_token_id differs: target 0 .* draft 5"):
        check_tokenizer_compat(FakeTokenizer(VOCAB), FakeTokenizer(VOCAB, eos=5))


def test_same_vocab_different_merges_is_caught() -> None:
    with pytest.raises(TokenizerMismatchError, match="different tokenization of a probe text"):
        check_tokenizer_compat(FakeTokenizer(VOCAB), FakeTokenizer(VOCAB, merge_ab=False))


def test_identical_fakes_pass() -> None:
    check_tokenizer_compat(FakeTokenizer(VOCAB), FakeTokenizer(dict(VOCAB)))
