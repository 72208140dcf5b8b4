"""The one stop-token rule, shared by both engines and the grammar compiler.

Stop ids = the EOS ids the model's config / generation config name (`config_eos`, passed in
by the engine that read them) ∪ the tokenizer's `eos_token_id` ∪ the usual end-of-turn
tokens (`<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`, ...) that the tokenizer has as added
(control) tokens, never as plain BPE pieces. Sorted, without duplicates. A grammar allows
these ids exactly where it may end; without a grammar the engine stops on them.
Knows tokenizers only; nothing of models or engines.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

END_OF_TURN_NAMES = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "</s>", "<|eos|>")


def eos_ids_of(*configs: Any) -> list[int]:
    """The `eos_token_id` values (an int or a list) of model / generation configs (None skipped)."""
    ids: list[int] = []
    for config in configs:
        value = getattr(config, "eos_token_id", None) if config is not None else None
        if isinstance(value, int):
            ids.append(value)
        elif isinstance(value, list | tuple):
            ids.extend(int(v) for v in value)
    return ids


def stop_token_ids(tokenizer: Any, *, config_eos: Iterable[int] = ()) -> list[int]:
    ids = {int(t) for t in config_eos}
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    added = {token.content: token_id
             for token_id, token in getattr(tokenizer, "added_tokens_decoder", {}).items()}
    ids.update(added[name] for name in END_OF_TURN_NAMES if name in added)
    return sorted(ids)
