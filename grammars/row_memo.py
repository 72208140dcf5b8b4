"""RowMemo: the mask rows a matcher filled, by position, reused while their history is replayed.

A matcher's mask after tokens h[:n] is a function of h[:n] alone (every backend is
deterministic). Speculative decoding fills the same positions twice: the drafter fills the
row at each draft position (fill_mask, accept, …, roll back), then the verify fills the K+1
rows after the same drafts (fill_masks). Kept here, the drafter's rows make the verify's
first K rows copies; only the row after the last draft is a new fill.

Contract:
- The *trail* is the token path the kept rows were filled under; the matcher's history is
  always a prefix of it. `accepted(position, token)` reports the token accepted at
  `position` (= history length before it): the same token as the trail's keeps every row;
  another one cuts the trail there and drops the rows past `position` (filled under the
  old token). A rollback changes nothing here (the history stays a prefix of the trail).
- `get(position, words)` copies the row kept for `position` into `words` and returns True,
  or returns False; `put(position, words)` keeps a copy. At most `slots` rows are kept,
  one per `position % slots` (a later position takes the slot), so a step of up to
  `slots - 1` drafts reuses every row.
- `forget()` drops every row and the trail (benchmarks time backend fills with it); the
  positions before it then count as unknown: any token accepted there drops later rows.

Knows nothing of grammars, backends or engines: it stores int32 words per position.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ROW_SLOTS = 16
_UNKNOWN = -2  # a trail entry no token equals


class RowMemo:
    __slots__ = ("_trail", "_positions", "_rows", "_slots")

    def __init__(self, *, slots: int = ROW_SLOTS) -> None:
        self._slots = slots
        self._trail: list[int] = []
        self._positions = [-1] * slots  # the position whose row each slot holds, -1: none
        self._rows: np.ndarray[Any, Any] | None = None  # int32 [slots, W], made on the first put

    def accepted(self, position: int, token_id: int) -> None:
        trail = self._trail
        if position < len(trail):
            if trail[position] == token_id:
                return
            del trail[position:]
            self._positions = [-1 if kept > position else kept for kept in self._positions]
        elif position > len(trail):  # after forget(): tokens never seen match nothing
            trail.extend([_UNKNOWN] * (position - len(trail)))
        trail.append(token_id)

    def get(self, position: int, words: np.ndarray[Any, Any]) -> bool:  # words [W] int32
        slot = position % self._slots
        if self._positions[slot] != position or self._rows is None:
            return False
        np.copyto(words, self._rows[slot])
        return True

    def put(self, position: int, words: np.ndarray[Any, Any]) -> None:  # words [W] int32
        if self._rows is None or self._rows.shape[1] != words.shape[0]:
            self._rows = np.empty((self._slots, words.shape[0]), dtype=np.int32)
            self._positions = [-1] * self._slots
        slot = position % self._slots
        np.copyto(self._rows[slot], words)
        self._positions[slot] = position

    def forget(self) -> None:
        self._trail.clear()
        self._positions = [-1] * self._slots
