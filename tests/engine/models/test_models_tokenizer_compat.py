"""Draft/target tokenizer compatibility: same family passes, mixed families fail with ids named."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from engine.models import TokenizerMismatchError, check_tokenizer_compat


@pytest.mark.e2e
def test_pulled_qwen_pair_is_compatible(require_models: Any, qwen_tokenizer: Any) -> None:
    """The real compatible pair: the tokenizers converted from the 0.5B and the 1.5B GGUF
    (two files, two pulls) pass, and agree with the shared Qwen2.5 tokenizer the tests use."""
    from transformers import AutoTokenizer

    dirs = require_models("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    target = AutoTokenizer.from_pretrained(str(dirs["qwen2.5-coder-1.5b"]))
    draft = AutoTokenizer.from_pretrained(str(dirs["qwen2.5-coder-0.5b"]))
    check_tokenizer_compat(target, draft)
    check_tokenizer_compat(target, qwen_tokenizer)


def test_qwen_with_one_merge_removed_fails_on_the_probe(
    qwen_tokenizer: Any, shared_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """The real Qwen tokenizer against a copy that lacks the merges forming one token of the
    probe text: same vocabulary, same special ids, different tokenization, caught."""
    import json
    import shutil

    from transformers import AutoTokenizer

    from engine.models.tokenizer_compat import PROBE_TEXT

    source = shared_dir / "tokenizers" / "qwen2.5"
    data = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    word = "Ġworld"  # " world" of the probe's "Hello, world!"
    assert word in qwen_tokenizer.convert_ids_to_tokens(qwen_tokenizer.encode(PROBE_TEXT, add_special_tokens=False))
    merges = data["model"]["merges"]
    kept = [pair for pair in merges if "".join(pair) != word]
    assert len(kept) < len(merges)
    data["model"]["merges"] = kept
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    shutil.copy(source / "tokenizer_config.json", tmp_path / "tokenizer_config.json")
    altered = AutoTokenizer.from_pretrained(str(tmp_path))
    assert altered.get_vocab() == qwen_tokenizer.get_vocab()
    with pytest.raises(TokenizerMismatchError, match="different tokenization of a probe text"):
        check_tokenizer_compat(qwen_tokenizer, altered)


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
