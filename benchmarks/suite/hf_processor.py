"""A grammar logits processor for HF assisted generation that follows `input_ids`.

`PrefixGrammarProcessor(compiled_grammar, prompt_len=)` is a `transformers.LogitsProcessor`
on xgrammar's `GrammarMatcher` (the same compiled grammar specgate uses). On every call it
compares the generated part of `input_ids` (`input_ids[0, prompt_len:]`) with the tokens
it has consumed, rolls the matcher back to their common prefix, accepts the rest, and masks
`scores` with the matcher's next-token bitmask. Its state is therefore a function of
`input_ids` alone, whatever order HF calls it in.

Why not `xgrammar.contrib.hf.LogitsProcessor`: that processor assumes one call per emitted
token (it accepts `input_ids[:, -1]` on every call after the first and never rolls back).
HF assisted generation calls one processor list for the K draft positions of the assistant
and then for the K+1 verify positions of the target, so it re-accepts tokens, walks past
rejected drafts, and fails its own `assert accept_token(...)` (xgrammar 0.2.8, hf.py:96) on
every constrained workload of `specgate bench`. What a user would have to write to run HF
assisted generation under a grammar is this class.

Batch size 1 only. When the matcher has terminated (a stop token was accepted) the scores
pass through unmasked: HF stops there and never samples from those rows. A token the
grammar refuses raises `ValueError` naming it (a peer bug, recorded by the bench).
Knows nothing about models, prompts or the bench.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import transformers


class PrefixGrammarProcessor(transformers.LogitsProcessor):
    def __init__(self, compiled_grammar: Any, *, prompt_len: int) -> None:
        import xgrammar as xgr

        self._xgr = xgr
        self.prompt_len = prompt_len
        self.matcher = xgr.GrammarMatcher(compiled_grammar)
        self.consumed: list[int] = []
        self.bitmask = xgr.allocate_token_bitmask(1, compiled_grammar.tokenizer_info.vocab_size)
        self.rollbacks = 0  # tokens rolled back over the run (drafts HF rejected)

    def _sync(self, generated: list[int]) -> None:
        common = 0
        limit = min(len(generated), len(self.consumed))
        while common < limit and generated[common] == self.consumed[common]:
            common += 1
        if len(self.consumed) > common:
            self.matcher.rollback(len(self.consumed) - common)
            self.rollbacks += len(self.consumed) - common
            del self.consumed[common:]
        for token in generated[common:]:
            if not self.matcher.accept_token(token):
                raise ValueError(f"token {token} at generated position {len(self.consumed)} is refused by the grammar")
            self.consumed.append(token)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        # input_ids: [1, L]; scores: [1, V]
        if input_ids.shape[0] != 1:
            raise ValueError(f"PrefixGrammarProcessor supports batch size 1, got {input_ids.shape[0]}")
        self._sync(input_ids[0, self.prompt_len:].tolist())
        if self.matcher.is_terminated():
            return scores
        self.matcher.fill_next_token_bitmask(self.bitmask, 0)
        masked = scores.to("cpu", copy=True)
        self._xgr.apply_token_bitmask_inplace(masked, self.bitmask)
        return cast(torch.FloatTensor, masked.to(scores.device))
