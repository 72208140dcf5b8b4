"""One model's KV cache for one sequence, with exact rollback: the only code that touches
transformers' cache API (pinned to transformers 5.19).

transformers 5.19 facts this adapter relies on (tests/engine/torch_engine/test_kv_cache.py checks them):
the forward kwarg is `past_key_values=` (5.24 renames it `cache=`; 5.20 silently ignores
`cache=`), `DynamicCache.crop(-n)` drops the last n positions of every layer (a positive
argument means "keep this many" and is deprecated), and `get_seq_length()` counts cached
positions. Position ids are passed explicitly so a cropped cache never shifts them.

Invariant: `tokens` is exactly the token sequence whose keys/values are cached. The adapter
does not know about drafts, grammars or requests; callers sync it to the committed sequence
with `sync_to(tokens)` (crop to the longest common prefix).

Prefix sharing (`engine.torch_engine.prefix_cache`): `export_range(start, end)` copies the keys/values of
cached positions out (per layer, fresh tensors), `load(tokens, layers)` seeds an empty cache
with copies. transformers 5.19 layout relied on: `DynamicCache.layers` holds one
`DynamicLayer` per decoder layer with `.keys` / `.values` [batch 1, kv_heads, positions,
head_dim], grown by `torch.cat` in `update` (never written in place). Sliding-window or other
layer kinds drop or transform positions, so `shareable` is False for them and nothing is
exported.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Protocol

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

LayerKV = tuple[torch.Tensor, torch.Tensor]  # (keys, values), each [1, kv_heads, positions, head_dim]


class ModelCache(Protocol):
    """What the decoder, drafters and cost model use of a per-sequence cache: `KVCache` here
    (transformers) or `engine.torch_engine.llama_cpp_model.LlamaCppCache` (llama.cpp kernels)."""

    tokens: list[int]

    def __len__(self) -> int: ...
    def extend(self, token_ids: Sequence[int], *, num_logits: int = 1) -> torch.Tensor: ...
    def crop(self, length: int) -> None: ...
    def sync_to(self, tokens: Sequence[int]) -> list[int]: ...
    def pending_for_logits(self, tokens: Sequence[int]) -> list[int]: ...
    def reset(self) -> None: ...

    @property
    def shareable(self) -> bool: ...


def cache_for(model: Any, *, device: torch.device | str = "cpu", prefix: Sequence[int] = (),
              pool: Hashable = None) -> ModelCache:
    """A new cache for `model`: its own `new_cache(prefix=, pool=)` where it has one
    (llama.cpp: it may start holding a common prefix with `prefix`, reused from an earlier
    sequence of the same `pool`), else an empty transformers `KVCache` (its prefix reuse is
    `engine.torch_engine.prefix_cache`)."""
    new_cache = getattr(model, "new_cache", None)
    if new_cache is not None:
        return new_cache(prefix=prefix, pool=pool)  # type: ignore[no-any-return]
    return KVCache(model, device=device)


def logits_width(model: Any) -> int:
    """Width of the model's logits rows (the LM head's rows; may exceed the tokenizer)."""
    width = getattr(model, "logits_width", None)
    if width is not None:
        return int(width)
    return int(model.get_output_embeddings().weight.shape[0])


def common_prefix_length(cached: Sequence[int], wanted: Sequence[int]) -> int:
    common = 0
    for a, b in zip(cached, wanted, strict=False):
        if a != b:
            break
        common += 1
    return common


class PrefixSync:
    """`sync_to` and `pending_for_logits` for any cache with `tokens` and an exact `crop`."""

    tokens: list[int]

    def crop(self, length: int) -> None:
        raise NotImplementedError

    def sync_to(self, tokens: Sequence[int]) -> list[int]:
        """Crop to the longest common prefix with `tokens`; return the tokens still to feed."""
        common = common_prefix_length(self.tokens, tokens)
        self.crop(common)
        return list(tokens[common:])

    def pending_for_logits(self, tokens: Sequence[int]) -> list[int]:
        """Sync to `tokens` (non-empty) and return what to feed so that the next `extend`
        yields the logits after `tokens[-1]`: the uncached tail, or, when everything is cached
        already, the last token again (its position is cropped and re-fed)."""
        pending = self.sync_to(tokens)
        if not pending:
            self.crop(len(self.tokens) - 1)
            pending = [tokens[-1]]
        return pending


class KVCache(PrefixSync):
    """Per-sequence cache of one causal LM; `extend` feeds tokens and returns their logits."""

    def __init__(self, model: torch.nn.Module, *, device: torch.device | str = "cpu") -> None:
        self.model = model
        self.device = torch.device(device)
        self.cache = DynamicCache(config=getattr(model, "config", None))
        self.tokens: list[int] = []

    def __len__(self) -> int:
        return len(self.tokens)

    @torch.inference_mode()
    def extend(self, token_ids: Sequence[int], *, num_logits: int = 1) -> torch.Tensor:
        """Append `token_ids` (at least one, all >= 0) and return float32 logits of the last
        `num_logits` fed positions: [num_logits, V] (row i predicts the token after fed token
        len-num_logits+i)."""
        if not token_ids:
            raise ValueError("KVCache.extend needs at least one token")
        if min(token_ids) < 0:
            raise ValueError(f"negative token id reached the model: {list(token_ids)}")
        if not 1 <= num_logits <= len(token_ids):
            raise ValueError(f"num_logits must be in [1, {len(token_ids)}], got {num_logits}")
        start = len(self.tokens)
        input_ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self.device)  # [1, T]
        position_ids = torch.arange(start, start + len(token_ids), device=self.device)[None]  # [1, T]
        out = self.model(
            input_ids=input_ids,
            position_ids=position_ids,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=num_logits,
        )
        self.tokens.extend(int(t) for t in token_ids)
        if self.cache.get_seq_length() != len(self.tokens):
            raise RuntimeError(
                f"KV cache length {self.cache.get_seq_length()} != {len(self.tokens)} tokens: "
                "transformers ignored past_key_values (API changed?)"
            )
        return out.logits[0].float()  # [num_logits, V]

    def crop(self, length: int) -> None:
        """Keep the first `length` cached positions (exact rollback of the rest)."""
        if not 0 <= length <= len(self.tokens):
            raise ValueError(f"crop length {length} outside [0, {len(self.tokens)}]")
        remove = len(self.tokens) - length
        if remove == 0:
            return
        if length == 0:
            self.reset()
            return
        self.cache.crop(-remove)
        del self.tokens[length:]

    @property
    def shareable(self) -> bool:
        """Whether positions can be exported / loaded: every layer a plain `DynamicLayer`."""
        return bool(self.cache.layers) and all(type(layer) is DynamicLayer for layer in self.cache.layers)

    def export_range(self, start: int, end: int) -> list[LayerKV]:
        """Copies of the keys/values of cached positions [start, end), one (k, v) per layer,
        each [1, kv_heads, end-start, head_dim], contiguous and owned by the caller."""
        if not 0 <= start < end <= len(self.tokens):
            raise ValueError(f"export range [{start}, {end}) outside the {len(self.tokens)} cached positions")
        if not self.shareable:
            raise RuntimeError("this model's cache layers cannot be shared (not all DynamicLayer)")
        out: list[LayerKV] = []
        for layer in self.cache.layers:
            assert isinstance(layer, DynamicLayer) and layer.keys is not None and layer.values is not None
            out.append((layer.keys[:, :, start:end].clone(), layer.values[:, :, start:end].clone()))
        return out

    def load(self, tokens: Sequence[int], layers: Sequence[LayerKV]) -> None:
        """Replace the cache by `tokens` whose keys/values are `layers` (one (k, v) per layer,
        [1, kv_heads, len(tokens), head_dim]); the tensors are copied in, never aliased."""
        self.reset()
        if not tokens:
            return
        if not self.shareable or len(layers) != len(self.cache.layers):
            raise RuntimeError(f"cannot load {len(layers)} layers into this cache ({len(self.cache.layers)} layers)")
        for index, (keys, values) in enumerate(layers):
            if keys.shape[2] != len(tokens) or values.shape[2] != len(tokens):
                raise ValueError(f"layer {index}: {keys.shape[2]} positions for {len(tokens)} tokens")
            self.cache.update(keys, values, index)  # DynamicLayer.update concatenates: a copy
        self.tokens = [int(t) for t in tokens]

    def reset(self) -> None:
        self.cache = DynamicCache(config=getattr(self.model, "config", None))
        self.tokens = []
