"""Draft/target tokenizer compatibility, checked once at engine start-up.

Speculative decoding feeds draft token ids to the target, so both tokenizers must map the
same ids to the same tokens, agree on the special tokens (eos above all) and split text the
same way. Checked: the full vocabulary (`get_vocab()`, added tokens included; compared as
dicts, so the 151k Qwen vocabulary takes milliseconds), eos/bos/pad ids, and the encoding of
a fixed probe text (catches differing merges or normalizers). A mismatch raises
`TokenizerMismatchError` naming the first differing ids and their token strings. Mixing
model families (Qwen vs SmolLM2) is the classic mistake. Knows nothing about models.
"""

from __future__ import annotations

from typing import Any

from engine.models.errors import TokenizerMismatchError

MAX_REPORTED = 5
PROBE_TEXT = (
    'Hello, world! {"name": "Ada", "tags": ["x", 42, null]}\n'
    "def f(x):\n    return x ** 2  # résumé 日本語 🙂\t<|im_end|>"
)


def _id_to_token(vocab: dict[str, int]) -> dict[int, str]:
    return {token_id: token for token, token_id in vocab.items()}


def _describe_vocab_diff(target_vocab: dict[str, int], draft_vocab: dict[str, int]) -> str:
    target_by_id, draft_by_id = _id_to_token(target_vocab), _id_to_token(draft_vocab)
    differing = sorted(
        {i for i in target_by_id.keys() | draft_by_id.keys()
         if target_by_id.get(i) != draft_by_id.get(i)}
    )
    shown = ", ".join(
        f"id {i}: target {target_by_id.get(i)!r} vs draft {draft_by_id.get(i)!r}"
        for i in differing[:MAX_REPORTED]
    )
    more = f" (and {len(differing) - MAX_REPORTED} more)" if len(differing) > MAX_REPORTED else ""
    return (
        f"vocabularies differ at {len(differing)} ids (target has {len(target_vocab)} tokens, "
        f"draft {len(draft_vocab)}); first: {shown}{more}"
    )


def check_tokenizer_compat(target_tokenizer: Any, draft_tokenizer: Any) -> None:
    """Return None if draft and target tokenize identically; else raise TokenizerMismatchError."""
    problems = []
    target_vocab: dict[str, int] = target_tokenizer.get_vocab()
    draft_vocab: dict[str, int] = draft_tokenizer.get_vocab()
    if target_vocab != draft_vocab:
        problems.append(_describe_vocab_diff(target_vocab, draft_vocab))
    for attr in ("eos_token_id", "bos_token_id", "pad_token_id"):
        target_id = getattr(target_tokenizer, attr, None)
        draft_id = getattr(draft_tokenizer, attr, None)
        if target_id != draft_id and not (attr == "pad_token_id"):
            problems.append(
                f"{attr} differs: target {target_id} "
                f"({target_tokenizer.convert_ids_to_tokens(target_id) if target_id is not None else None!r})"
                f" vs draft {draft_id} "
                f"({draft_tokenizer.convert_ids_to_tokens(draft_id) if draft_id is not None else None!r})"
            )
    if not problems:
        target_ids = target_tokenizer.encode(PROBE_TEXT, add_special_tokens=False)
        draft_ids = draft_tokenizer.encode(PROBE_TEXT, add_special_tokens=False)
        if target_ids != draft_ids:
            at = next(
                (i for i, (a, b) in enumerate(zip(target_ids, draft_ids, strict=False)) if a != b),
                min(len(target_ids), len(draft_ids)),
            )
            problems.append(
                f"same vocabulary but different tokenization of a probe text at position {at}: "
                f"target ids {target_ids[at:at + 3]} vs draft ids {draft_ids[at:at + 3]}"
            )
    if problems:
        raise TokenizerMismatchError(
            "draft and target tokenizers are incompatible (speculative decoding needs identical "
            "token ids; are the models from the same family?): " + "; ".join(problems)
        )
