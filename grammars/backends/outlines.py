"""outlines-core backend (second choice): regex-DFA grammars for json_schema, regex, choice.

Contract: builds an outlines `Vocabulary` by hand from the tokenizer's vocabulary (its own
loader calls the model hub): byte-level BPE token strings are mapped back to their bytes,
special/added control tokens and non-text entries (grammars.vocabulary) are left out, the
first stop token is the vocabulary's EOS.
JSON schemas become regexes (`build_regex_from_schema`) with whitespace bounded by
`max_whitespace`. Masks are written with `Guide.write_mask_into` (straight into the int32
row), never via token lists. Any other kind is a GrammarError naming it. The outlines
converter enforces fewer JSON-Schema keywords than xgrammar (e.g. no minLength/maxLength on
unbounded patterns beyond what the regex encodes); jump-forward text is not computed ("").
Rollback depth is bounded by `max_rollback` (default 4096 tokens).

Knows nothing of caching, timeouts, sampling or HTTP.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import outlines_core
import torch
from outlines_core.json_schema import build_regex_from_schema

from grammars.errors import GrammarError
from grammars.matcher import Matcher
from grammars.spec import GrammarSpec
from grammars.vocabulary import TokenizerVocabulary

_REGEX_META = set("\\.+*?()|[]{}^$#&-~")


def regex_escape(text: str) -> str:
    return "".join("\\" + ch if ch in _REGEX_META else ch for ch in text)


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(char): byte for byte, char in zip(printable, chars, strict=True)}


def token_bytes(token: str) -> bytes | None:
    decoder = _byte_decoder()
    if all(ch in decoder for ch in token):
        return bytes(decoder[ch] for ch in token)
    if token.startswith("▁") or "▁" in token:  # sentencepiece
        return token.replace("▁", " ").encode()
    return None


class OutlinesMatcher(Matcher):
    def __init__(self, index: outlines_core.Index, *, max_rollback: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._guide = outlines_core.Guide(index, max_rollback=max_rollback)
        self._words = (self.vocab_size + 31) // 32

    def _accept(self, token_id: int) -> bool:
        if not self._guide.accepts_tokens([token_id]):
            return False
        self._guide.advance(token_id, return_tokens=False)
        return True

    def _rollback(self, num_tokens: int) -> None:
        self._guide.rollback_state(num_tokens)

    def _fill(self, bitmask: torch.Tensor, row: int) -> None:
        target = bitmask[row]
        self._guide.write_mask_into(target.data_ptr(), self._words, 4)
        if self._guide.is_finished():
            self._set_stop_bits(bitmask, row)

    def _set_stop_bits(self, bitmask: torch.Tensor, row: int) -> None:
        for token in self.stop_token_ids:
            word, bit = divmod(token, 32)
            value = (int(bitmask[row, word]) & 0xFFFFFFFF) | (1 << bit)
            bitmask[row, word] = value - (1 << 32) if value >= 1 << 31 else value

    def _is_complete(self) -> bool:
        return bool(self._guide.is_finished())


class OutlinesBackend:
    name = "outlines"
    supported_kinds = frozenset({"json_schema", "regex", "choice"})

    def __init__(
        self,
        tokenizer: Any,
        *,
        vocab_size: int,
        stop_token_ids: Sequence[int],
        max_whitespace: int,
        max_rollback: int = 4096,
        vocabulary: TokenizerVocabulary | None = None,
    ) -> None:
        if not stop_token_ids:
            raise GrammarError("the outlines backend needs at least one stop token id")
        self.vocab_size = vocab_size
        self.stop_token_ids = tuple(stop_token_ids)
        self.max_whitespace = max_whitespace
        self.max_rollback = max_rollback
        vocabulary = vocabulary if vocabulary is not None else TokenizerVocabulary(tokenizer)
        self.vocabulary = self._build_vocabulary(tokenizer, vocabulary.non_text_ids)

    def _build_vocabulary(self, tokenizer: Any, non_text_ids: Sequence[int]) -> outlines_core.Vocabulary:
        special = set(getattr(tokenizer, "all_special_ids", []))
        special.update(non_text_ids)
        special.update(self.stop_token_ids)
        added = {
            token_id
            for token_id, token in getattr(tokenizer, "added_tokens_decoder", {}).items()
            if getattr(token, "special", True)
        }
        mapping: dict[bytes, list[int]] = {}
        for token, token_id in tokenizer.get_vocab().items():
            if token_id in special or token_id in added or token_id >= self.vocab_size:
                continue
            data = token_bytes(token)
            if data is None:
                data = token.encode()
            if data:
                mapping.setdefault(data, []).append(token_id)
        return outlines_core.Vocabulary(self.stop_token_ids[0], mapping)

    def regex_for(self, spec: GrammarSpec) -> str:
        if spec.kind == "regex":
            return spec.source
        if spec.kind == "choice":
            return "(" + "|".join(regex_escape(choice) for choice in spec.source_json) + ")"
        if spec.kind == "json_schema":
            whitespace = f"[ \\n\\t]{{0,{self.max_whitespace}}}"
            try:
                return build_regex_from_schema(spec.source, whitespace)
            except Exception as exc:
                raise GrammarError(f"cannot compile json_schema grammar: {exc}") from exc
        raise GrammarError(
            f"grammar kind '{spec.kind}' is not supported by the outlines backend "
            f"(supported: {', '.join(sorted(self.supported_kinds))})"
        )

    def compile(self, spec: GrammarSpec) -> tuple[outlines_core.Index, int]:
        regex = self.regex_for(spec)
        try:
            index = outlines_core.Index(regex, self.vocabulary)
        except Exception as exc:
            raise GrammarError(f"cannot compile {spec.kind} grammar: {exc}") from exc
        return index, len(pickle.dumps(index))

    def matcher(self, handle: outlines_core.Index, *, encode: Callable[[str], list[int]]) -> Matcher:
        return OutlinesMatcher(
            handle,
            max_rollback=self.max_rollback,
            vocab_size=self.vocab_size,
            stop_token_ids=self.stop_token_ids,
            encode=encode,
        )


__all__ = ["OutlinesBackend", "OutlinesMatcher"]
