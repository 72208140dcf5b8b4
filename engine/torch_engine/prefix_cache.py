"""Automatic prefix caching: the keys/values of recent prompts, reused by later sequences
that start with the same tokens, for the target and the draft model.

Layout: prompts are cut into blocks of `block_tokens` tokens. A block is named by its chain
key (the id of the block before it, the exact tokens of this block), so a key names its
whole prefix by exact token match (a dict compares the tuples: no hash collision can alias
two prefixes). Prompts that share a prefix share its blocks (one copy of a schema for every
question over it). Each model has its own pool ("target", "draft"): one model's keys/values
are never given to another.

Contract:
- `restore(kv, tokens, pool=)` seeds an EMPTY `KVCache` with the longest run of cached full
  blocks that starts `tokens`, at most len(tokens) - 1 positions (the last prompt token is
  always fed, for its logits), and returns how many positions it restored (0 on a miss).
  The sequence gets copies (`KVCache.load`): stored blocks are never handed out, never
  written after they are stored, so concurrent sequences never share a mutable tensor.
- `publish(kv, tokens, pool=)` stores the full blocks of `tokens` (a prompt, all cached by
  `kv`) that are not stored yet, as copies (`KVCache.export_range`).
- Bound: the bytes of all blocks of all pools stay <= `capacity_bytes`; the least recently
  used block is evicted first. A lookup or publish touches its chain from the last block
  back to the first, so a block is always at least as recent as every block after it: a
  chain is evicted from its tail and no cached block ever loses the block before it.
  A prompt that does not fit whole is stored from its start as far as the bound allows.
- Thread-safe: one lock guards the index; tensors are copied outside it.

Exactness: a restored position holds the keys/values that a forward of the same model over
the same tokens at the same positions produced, so the logits after a restored prefix equal
those of a full prefill up to floating-point summation order (tests check this on float32).
Knows nothing about requests, grammars or drafts; `stats()` returns numbers, it logs nothing.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.stats import PoolStats, PrefixCacheStats
from engine.torch_engine.kv_cache import KVCache, LayerKV, ModelCache

POOLS = ("target", "draft")
BLOCK_TOKENS = 16
MIB = 1 << 20

_ChainKey = tuple[int, tuple[int, ...]]  # (id of the block before, or -1; this block's tokens)


@dataclass
class _Block:
    block_id: int
    pool: str
    key: _ChainKey
    layers: list[LayerKV]  # per layer (k, v), each [1, kv_heads, block_tokens, head_dim]
    nbytes: int


def _layers_nbytes(layers: list[LayerKV]) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)


class PrefixCache:
    def __init__(self, *, capacity_bytes: int, block_tokens: int = BLOCK_TOKENS) -> None:
        if capacity_bytes <= 0:
            raise ValueError(f"capacity_bytes must be > 0, got {capacity_bytes}")
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        self.capacity_bytes = capacity_bytes
        self.block_tokens = block_tokens
        self._lock = threading.Lock()
        self._blocks: OrderedDict[tuple[str, _ChainKey], _Block] = OrderedDict()  # least recently used first
        self._keys: dict[str, dict[_ChainKey, _Block]] = {pool: {} for pool in POOLS}
        self._stats: dict[str, PoolStats] = {pool: PoolStats() for pool in POOLS}
        self._ids = itertools.count()
        self._versions = dict.fromkeys(POOLS, 0)
        self._bytes = 0

    @classmethod
    def from_mib(cls, mib: int, *, block_tokens: int = BLOCK_TOKENS) -> PrefixCache | None:
        """A cache bounded at `mib` MiB, or None for 0 (prefix caching off)."""
        return cls(capacity_bytes=mib * MIB, block_tokens=block_tokens) if mib > 0 else None

    # ---- lookups ---------------------------------------------------------------------------

    def _chain(self, pool: str, tokens: Sequence[int], num_blocks: int) -> list[_Block]:
        """The cached blocks that start `tokens` (at most `num_blocks`); lock held."""
        index = self._keys[pool]
        chain: list[_Block] = []
        parent = -1
        size = self.block_tokens
        for b in range(num_blocks):
            block = index.get((parent, tuple(tokens[b * size : (b + 1) * size])))
            if block is None:
                break
            chain.append(block)
            parent = block.block_id
        return chain

    def _touch(self, chain: list[_Block]) -> None:
        """Mark the chain most recently used, last block first (so the first ends newest)."""
        for block in reversed(chain):
            self._blocks.move_to_end((block.pool, block.key))

    def restore(self, kv: ModelCache, tokens: Sequence[int], *, pool: str) -> int:
        """Seed the empty `kv` with the cached prefix of `tokens`; return its length."""
        if len(kv) or not kv.shareable or not isinstance(kv, KVCache):
            return 0
        num_blocks = max(len(tokens) - 1, 0) // self.block_tokens
        with self._lock:
            stats = self._stats[pool]
            stats.queries += 1
            chain = self._chain(pool, tokens, num_blocks)
            if not chain:
                return 0
            self._touch(chain)
            stats.hits += 1
            stats.cached_tokens += len(chain) * self.block_tokens
        length = len(chain) * self.block_tokens
        layers = [
            (torch.cat([b.layers[i][0] for b in chain], dim=2), torch.cat([b.layers[i][1] for b in chain], dim=2))
            for i in range(len(chain[0].layers))
        ]  # per layer [1, kv_heads, length, head_dim]
        kv.load(tokens[:length], layers)
        return length

    # ---- storing ---------------------------------------------------------------------------

    def publish(self, kv: ModelCache, tokens: Sequence[int], *, pool: str) -> int:
        """Store the full blocks of `tokens` (cached by `kv`) not stored yet; return how
        many positions were newly stored."""
        size = self.block_tokens
        num_blocks = min(len(tokens), len(kv)) // size
        if num_blocks == 0 or not kv.shareable or not isinstance(kv, KVCache) or list(kv.tokens[: num_blocks * size]) != list(tokens[: num_blocks * size]):
            return 0
        with self._lock:
            have = len(self._chain(pool, tokens, num_blocks))
        if have == num_blocks:
            with self._lock:
                self._touch(self._chain(pool, tokens, num_blocks))
            return 0
        new = [kv.export_range(b * size, (b + 1) * size) for b in range(have, num_blocks)]  # copies, lock free
        with self._lock:
            return self._insert(pool, tokens, num_blocks, new)

    def _insert(self, pool: str, tokens: Sequence[int], num_blocks: int, new: list[list[LayerKV]]) -> int:
        """Insert the blocks missing from the chain of `tokens` (lock held)."""
        size = self.block_tokens
        index = self._keys[pool]
        stats = self._stats[pool]
        chain = self._chain(pool, tokens, num_blocks)  # may have grown or shrunk since the copies
        first_new = num_blocks - len(new)
        if len(chain) < first_new:
            return 0  # a block our copies depend on was evicted meanwhile: store nothing
        self._touch(chain)
        protected = {(pool, b.key) for b in chain}
        stored = 0
        for b in range(len(chain), num_blocks):
            layers = new[b - first_new]
            nbytes = _layers_nbytes(layers)
            if not self._make_room(nbytes, protected):
                break
            parent = chain[-1].block_id if chain else -1
            key: _ChainKey = (parent, tuple(tokens[b * size : (b + 1) * size]))
            block = _Block(next(self._ids), pool, key, layers, nbytes)
            self._blocks[(pool, key)] = block
            index[key] = block
            self._bytes += nbytes
            stats.blocks += 1
            stats.bytes += nbytes
            stats.stored_tokens += size
            chain.append(block)
            protected.add((pool, key))
            stored += size
        self._touch(chain)
        if stored:
            self._versions[pool] += 1
        return stored

    def _make_room(self, nbytes: int, protected: set[tuple[str, _ChainKey]]) -> bool:
        """Evict least recently used blocks (never `protected` ones) until `nbytes` fit."""
        while self._bytes + nbytes > self.capacity_bytes:
            if not self._blocks:
                return False
            key, victim = next(iter(self._blocks.items()))
            if key in protected:
                return False
            del self._blocks[key]
            del self._keys[victim.pool][victim.key]
            self._bytes -= victim.nbytes
            stats = self._stats[victim.pool]
            stats.blocks -= 1
            stats.bytes -= victim.nbytes
            stats.evicted_blocks += 1
        return True

    # ---- observability ---------------------------------------------------------------------

    def version(self, pool: str) -> int:
        """Counts the publishes that stored something in `pool` (a miss can only turn into a
        hit after it changes)."""
        return self._versions[pool]

    @property
    def bytes_used(self) -> int:
        return self._bytes

    def stats(self) -> PrefixCacheStats:
        with self._lock:
            pools = {name: PoolStats(**vars(s)) for name, s in self._stats.items()}
        return PrefixCacheStats(capacity_bytes=self.capacity_bytes, block_tokens=self.block_tokens, pools=pools)

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()
            for index in self._keys.values():
                index.clear()
            for stats in self._stats.values():
                stats.blocks = stats.bytes = 0
            self._bytes = 0
