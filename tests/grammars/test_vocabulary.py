"""Non-text vocabulary entries (Qwen2.5's `[PAD151665]`…) and special control tokens are in no
grammar mask and accepted by no matcher, on every backend; ordinary text tokens still are."""

from __future__ import annotations

import pytest
import torch

from grammars import GrammarSpec
from grammars.vocabulary import TokenizerVocabulary
from tokenmask import unpack_bitmask

QWEN_VOCAB = 151_936


def test_qwen_non_text_entries_are_the_pad_fillers(qwen_tokenizer) -> None:  # type: ignore[no-untyped-def]
    vocabulary = TokenizerVocabulary(qwen_tokenizer)
    tokens = qwen_tokenizer.convert_ids_to_tokens(list(vocabulary.non_text_ids))
    assert len(tokens) == 271 and all(t == f"[PAD{i}]" for t, i in zip(tokens, vocabulary.non_text_ids, strict=True))
    assert 151644 in vocabulary.special_ids  # <|im_start|>
    excluded = vocabulary.excluded_ids([151643, 151645])
    assert 151645 not in excluded and 151644 in excluded and 151888 in excluded
    assert 151657 not in excluded  # <tool_call>: an added token that is text, not special
    # none of them is the tokenization of text: encoding their literal text gives other ids
    assert 151888 not in qwen_tokenizer.encode("[PAD151888]", add_special_tokens=False)


@pytest.mark.parametrize("spec", [
    GrammarSpec("json_schema", '{"type":"string"}', ()),
    GrammarSpec("regex", "[a-zA-Z0-9\\[\\]]{0,16}", ()),  # admits "[PAD151888]" as text
])
def test_no_mask_allows_non_text_or_control_tokens(any_compiler, spec) -> None:  # type: ignore[no-untyped-def]
    compiler = any_compiler
    excluded = torch.tensor(compiler.vocabulary.excluded_ids(compiler.stop_token_ids))
    matcher = compiler.compile(spec).matcher()
    assert matcher.accept_text('"ab' if spec.kind == "json_schema" else "ab")
    bitmask = compiler.allocate_bitmask(3)
    rows = matcher.fill_masks(bitmask, [matcher._encode("c")[0], matcher._encode("d")[0]])
    assert rows == 3
    allowed = unpack_bitmask(bitmask, QWEN_VOCAB)  # [3, V] bool
    assert allowed[:, matcher._encode("xyz")[0]].all()  # text is still allowed
    assert not allowed[:, excluded].any()
    accepted = matcher.num_accepted
    for token in (151665, 151888, 151935, 151644):
        assert not matcher.accept_token(token)
    assert matcher.num_accepted == accepted
