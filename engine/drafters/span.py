"""ForcedSpans: the draft tokens of a grammar-forced text (the matcher's jump-forward string),
tokenized the way the model would write it.

Where the grammar allows exactly one continuation text (a JSON key after `{"`, the
`<tool_call>\\n{"name": "` of a tool call, an enum's common prefix), its tokens enter the
draft chain without a draft-model forward, with a one-hot q. That keeps the output law: a
deterministic proposal is a draw from a one-hot q, and rejection sampling is exact for any q;
what the tokenization changes is only how often the target accepts it.

Canonical at the span's boundaries: the text after a span is free, and a tokenizer may merge
a span's last characters with what follows (`":` then `"` is the one token `":"`). The span's
tokens are therefore the longest prefix of `encode(text)` that is also a prefix of
`encode(text + probe)` for every probe in `PROBES` (a letter, a digit, whitespace, quotes and
the punctuation JSON, SQL and tool calls continue with): tokens that stay the same whatever
comes next. The start needs no such care: the tokens before the span are committed (or drafted)
already, so the model continues from them whatever it would have merged.

A span ends before an added token (`<tool_call>`, `</tool_call>`): the grammar allows the
same text as plain pieces, and a model may well write those (Qwen2.5-Coder-1.5B at T = 0
writes `<`, `tool`, `_call`, `>`: measured, the forced `<tool_call>` draft was rejected on
every tool call, at the start and again at `</tool_call>`, each time losing the step). The
drafter, or history (`engine.drafters.history`), proposes there what this model writes.

Knows nothing of grammars, masks or models: text in, token ids out. Results are kept in a
bounded LRU cache by text (the same keys and tool prefixes recur on every request).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

PROBES = ("a", "A", "1", " ", "\n", '"', "'", ",", ":", "}", "]", "{", "[", "(", ")", ".", "_", "-", "=", "<")


class ForcedSpans:
    def __init__(self, tokenizer: Any, *, max_texts: int = 4096) -> None:
        if max_texts < 1:
            raise ValueError(f"max_texts must be >= 1, got {max_texts}")
        self.tokenizer = tokenizer
        self.max_texts = max_texts
        added = getattr(tokenizer, "get_added_vocab", None)
        vocab: dict[str, int] = dict(added()) if added is not None else {}
        self.added: frozenset[int] = frozenset(vocab.values())
        self.added_texts = tuple(text for text in vocab if text)
        self._cache: OrderedDict[str, tuple[int, ...]] = OrderedDict()

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def tokens(self, text: str) -> tuple[int, ...]:
        """The canonical draft tokens of the forced `text` (possibly fewer than encode(text)
        gives, possibly none)."""
        if not text:
            return ()
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        key = text
        ends = [i for i in (text.find(added) for added in self.added_texts) if i >= 0]
        if ends:  # the text before the first added token, its tokens as stable as any other span's
            text = text[: min(ends)]
        ids = self._encode(text)
        stable = len(ids)
        for probe in PROBES:
            if stable == 0:
                break
            extended = self._encode(text + probe)
            common = 0
            for a, b in zip(ids[:stable], extended, strict=False):
                if a != b:
                    break
                common += 1
            stable = common
        result = tuple(ids[:stable])
        self._cache[key] = result
        if len(self._cache) > self.max_texts:
            self._cache.popitem(last=False)
        return result
