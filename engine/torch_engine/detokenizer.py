"""Incremental detokenization with stop strings, for one request.

`push(token_ids) -> (text_delta, stopped)`: the text delta never splits a UTF-8 character
(a decode that ends in U+FFFD waits for more tokens), special tokens are skipped, and text
that might be the start of a stop string is held back until it cannot be; when a stop string
appears, the text is cut before it and `stopped` is True. `flush()` releases what was held
back at the end. Knows nothing about models or grammars.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Detokenizer:
    def __init__(self, tokenizer: Any, *, stop: Sequence[str] = ()) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self.holdback = max((len(s) for s in self.stop), default=1) - 1
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0
        self.text = ""      # all decoded text so far
        self.emitted = 0    # characters of `text` already returned

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def push(self, token_ids: Sequence[int]) -> tuple[str, bool]:
        self.ids.extend(token_ids)
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            self.text += full[len(prefix) :]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
        if self.stop:
            search_from = max(0, self.emitted - self.holdback)
            hits = [i for i in (self.text.find(s, search_from) for s in self.stop) if i >= 0]
            if hits:
                cut = min(hits)
                delta = self.text[self.emitted : cut]
                self.text = self.text[:cut]
                self.emitted = cut
                return delta, True
        upto = max(self.emitted, len(self.text) - self.holdback) if self.stop else len(self.text)
        delta = self.text[self.emitted : upto]
        self.emitted = upto
        return delta, False

    def flush(self) -> str:
        delta = self.text[self.emitted :]
        self.emitted = len(self.text)
        return delta
