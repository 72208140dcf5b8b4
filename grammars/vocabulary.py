"""Non-text vocabulary entries: ids a tokenizer never produces from text, kept out of every mask.

Contract:
- `TokenizerVocabulary(tokenizer)` serializes a Hugging Face fast tokenizer ONCE and finds
  `non_text_ids`: entries of a byte-level BPE vocabulary that no merge produces, that are
  longer than one symbol and that are not added tokens. Such entries (Qwen2.5 carries 271,
  `[PAD151665]` … `[PAD151935]`, padding its vocabulary to the model's 151,936 logits) are
  never the tokenization of any text, yet a grammar backend reading the vocabulary would
  take `[PAD151888]` for ten characters of text and allow it inside a JSON string. Every
  backend is built so these ids are never allowed and never accepted, as special tokens are.
- `special_ids` are the added tokens the tokenizer marks special (`<|im_start|>`, …): control
  tokens, not text either (llguidance and outlines already leave them out; xgrammar's
  TokenizerInfo reads them as their literal text). `excluded_ids(stop_token_ids)` is both
  sets less the stop tokens (which the matchers allow exactly when the grammar is complete).
  Added tokens that are not special (Qwen's `<tool_call>`) stay text: tool grammars use them.
- `json_with_non_text_special()` is the serialized tokenizer with the non-text entries also
  listed as special added tokens (what llguidance's `LLTokenizer` takes).
- Tokenizers that are not BPE (Unigram, WordPiece), or slow ones, have no non-text ids
  here (nothing is detected, nothing is excluded).

Knows nothing of grammars, masks or sampling.
"""

from __future__ import annotations

import json
from typing import Any


class TokenizerVocabulary:
    """The serialized tokenizer and the ids of its non-text vocabulary entries."""

    def __init__(self, tokenizer: Any) -> None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self.json_text: str | None = None
        self.non_text_ids: tuple[int, ...] = ()
        decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
        self.special_ids: tuple[int, ...] = tuple(sorted(
            int(token_id) for token_id, token in decoder.items() if getattr(token, "special", False)))
        if backend is None:
            return
        self.json_text = str(backend.to_str())
        data = json.loads(self.json_text)
        model = data.get("model") or {}
        if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
            return
        produced: set[str] = set()
        for merge in model.get("merges") or ():
            left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
            produced.add(left + right)
        added = {entry.get("content") for entry in data.get("added_tokens") or ()}
        self.non_text_ids = tuple(sorted(
            token_id for token, token_id in model["vocab"].items()
            if len(token) > 1 and token not in produced and token not in added
        ))

    def excluded_ids(self, stop_token_ids: Any = ()) -> tuple[int, ...]:
        """Non-text and special ids, less `stop_token_ids`: never allowed by a grammar mask."""
        stops = {int(token) for token in stop_token_ids}
        return tuple(sorted((set(self.non_text_ids) | set(self.special_ids)) - stops))

    def json_with_non_text_special(self) -> str | None:
        """The tokenizer JSON with every non-text entry added as a special token."""
        if self.json_text is None or not self.non_text_ids:
            return self.json_text
        data: dict[str, Any] = json.loads(self.json_text)
        vocab = data["model"]["vocab"]
        by_id = {token_id: token for token, token_id in vocab.items()}
        data.setdefault("added_tokens", []).extend(
            {"id": token_id, "content": by_id[token_id], "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True}
            for token_id in self.non_text_ids
        )
        return json.dumps(data, ensure_ascii=False)


__all__ = ["TokenizerVocabulary"]
