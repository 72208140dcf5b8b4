"""Matcher: one request's grammar state, backend-neutral (the per-request object).

Contract (every backend):
- `accept_token(tok)` advances and returns True, or returns False and leaves the state
  unchanged: for a token the grammar refuses, an id outside [0, vocab_size) (e.g. a −1
  placeholder), or any token once terminated. Never raises for those (vLLM #27969,
  SGLang's `!terminated_` assertion).
- A stop token is accepted exactly when the grammar is complete (`can_stop()`); accepting it
  terminates the matcher. Stop tokens are handled here, not by the backend, so every
  backend terminates the same way and rollback across a stop token is exact.
- `rollback(n)` undoes the last n accepted tokens (stop tokens included); n larger than the
  number of tokens accepted is a ValueError.
- `fill_mask(bitmask, row)` writes the allowed set into `bitmask[row]` (int32
  `[rows, ceil(V/32)]`, CPU). Once terminated the row allows only the stop tokens (the
  engine should not ask; this keeps the row non-empty rather than crashing).
- `fill_masks(bitmask, draft_tokens, start_row=, filled_rows=)`: row i (i = 0..K) is the mask
  after the first i drafts; it stops after the row of the first refused draft and after the
  row of a draft that terminates the grammar (a stop token); returns the rows that hold
  masks; the state is unchanged afterwards (advance, then roll back exactly the advances).
  The first `filled_rows` rows already hold their masks (a drafter filled them at its
  positions, straight into the verify's bitmask): they are passed over, not filled again,
  so a step's verify fills only the row after the last draft.
- `validate(tokens)` is the longest acceptable prefix length; state unchanged.
- `closing_moves()` / `closing_debt()` / `closing_valid()`: the texts grammars.closing tries
  from here toward the grammar's end, its estimate of what is still owed, and whether an end
  here is one to close on (a backend or wrapper that knows its grammar names better ones).
- `fill_times` / `fill_masks_times` (grammars.fill_times) count the backend fills this
  matcher made per latency bucket: those of `fill_mask`, and each row of `fill_masks` (a
  wrapper filling through its inner matcher's `_fill` is counted once, by the wrapper). Pure
  counters, ~0.4 µs a fill (two clock reads and a bisect).

Knows nothing of sampling, engines or HTTP; does not import torch except for the mask type.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import torch

from grammars.fill_times import FillTimes
from tokenmask import allow_only_

_STOP = -1  # marker in the history for an accepted stop token
# closers and fillers that end most structures (grammars.closing): a JSON value, a string,
# an object or array, a bracket, a statement
GENERIC_MOVES = ('"', "}", "]", ")", "0", "null", '""', "[]", "{}", ",", ":", "'", ";", " ", "[", "{")


class Matcher(ABC):
    """Backend-neutral per-request grammar state. Build via `CompiledGrammar.matcher()`."""

    def __init__(
        self,
        *,
        vocab_size: int,
        stop_token_ids: Sequence[int],
        encode: Callable[[str], list[int]],
    ) -> None:
        self.vocab_size = vocab_size
        self.stop_token_ids = tuple(stop_token_ids)
        self._stop_set = frozenset(stop_token_ids)
        self._encode = encode
        self._history: list[int] = []
        self._terminated = False
        self.fill_times = FillTimes()  # rows of fill_mask
        self.fill_masks_times = FillTimes()  # rows of fill_masks

    # -- backend primitives -------------------------------------------------------------
    @abstractmethod
    def _accept(self, token_id: int) -> bool: ...

    @abstractmethod
    def _rollback(self, num_tokens: int) -> None: ...

    @abstractmethod
    def _fill(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed set (stop tokens allowed iff complete) into bitmask[row]."""

    @abstractmethod
    def _is_complete(self) -> bool: ...

    def _jump_forward(self) -> str:
        return ""

    def closing_moves(self) -> tuple[str, ...]:
        """Short texts that may lead from here toward the grammar's end (grammars.closing
        tries each, in this order): the grammar's forced text, then closers and fillers."""
        forced = self.jump_forward_text()
        return (forced, *GENERIC_MOVES) if forced else GENERIC_MOVES

    def closing_valid(self) -> bool:
        """Whether the text so far, ended here, is an answer grammars.closing may close on
        (beyond `can_stop`: a check the grammar does not make; True where there is none)."""
        return True

    def closing_debt(self) -> int:
        """An estimate of the moves still owed before the grammar may end (grammars.closing's
        order; 0: none known)."""
        return 0

    def whitespace_run(self) -> int | None:
        """The trailing whitespace run the backend's row depends on beside its grammar state
        (grammars.whitespace: a cap masks by it; 0 without a cap), None where unknown."""
        return None

    # -- public API ----------------------------------------------------------------------
    @property
    def num_accepted(self) -> int:
        return len(self._history)

    def accept_token(self, token_id: int) -> bool:
        token_id = int(token_id)
        if self._terminated or not 0 <= token_id < self.vocab_size:
            return False
        if token_id in self._stop_set:
            if not self._is_complete():
                return False
            self._terminated = True
            self._history.append(_STOP)
            return True
        if not self._accept(token_id):
            return False
        self._history.append(token_id)
        return True

    def accept_text(self, text: str) -> bool:
        """Feed the tokens of `text`; False at the first refused token (earlier ones stay)."""
        return all(self.accept_token(token) for token in self._encode(text))

    def rollback(self, num_tokens: int) -> None:
        if num_tokens < 0 or num_tokens > len(self._history):
            raise ValueError(
                f"cannot roll back {num_tokens} tokens: {len(self._history)} accepted"
            )
        backend_tokens = 0
        for _ in range(num_tokens):
            if self._history.pop() == _STOP:
                self._terminated = False
            else:
                backend_tokens += 1
        if backend_tokens:
            self._rollback(backend_tokens)

    def encode(self, text: str) -> list[int]:
        """The tokenizer's tokens for `text` (no special tokens)."""
        return self._encode(text)

    def validate(self, tokens: Sequence[int]) -> int:
        accepted = 0
        for token in tokens:
            if not self.accept_token(token):
                break
            accepted += 1
        self.rollback(accepted)
        return accepted

    def can_stop(self) -> bool:
        return not self._terminated and self._is_complete()

    def is_terminated(self) -> bool:
        return self._terminated

    def jump_forward_text(self) -> str:
        """The longest text every continuation must start with ("" when terminated)."""
        return "" if self._terminated else self._jump_forward()

    def fill_mask(self, bitmask: torch.Tensor, row: int = 0) -> None:  # bitmask [R, W] int32
        self._check_bitmask(bitmask, row)
        if self._terminated:
            self._fill_stop_only(bitmask, row)
        else:
            self._timed_fill(bitmask, row, self.fill_times)

    def fill_masks(
        self, bitmask: torch.Tensor, draft_tokens: Sequence[int], *, start_row: int = 0, filled_rows: int = 0
    ) -> int:  # bitmask [R, W] int32, R >= start_row + len(draft_tokens) + 1
        """Masks for K drafts: row start_row+i is the mask after drafts[:i], i = 0..K.

        Advances through the drafts and rolls back exactly the advances. Stops after the
        row of the first draft the grammar refuses (its row is needed to resample there),
        and after the row whose draft terminates the grammar (no rows past a stop token).
        Rows start_row+i for i < `filled_rows` already hold their masks (the drafter's) and
        are not filled again. Returns the number of rows holding masks; the matcher state is
        unchanged.
        """
        self._check_bitmask(bitmask, start_row + len(draft_tokens))
        if self._terminated:
            return 0
        advanced = 0
        rows = 0
        try:
            for index in range(len(draft_tokens) + 1):
                if index >= filled_rows:
                    self._timed_fill(bitmask, start_row + index, self.fill_masks_times)
                rows += 1
                if index == len(draft_tokens):
                    break
                if not self.accept_token(int(draft_tokens[index])):
                    break
                advanced += 1
                if self._terminated:
                    break
        finally:
            self.rollback(advanced)
        return rows

    # -- helpers -------------------------------------------------------------------------
    def _timed_fill(self, bitmask: torch.Tensor, row: int, times: FillTimes) -> None:
        """The backend's fill of the row at the current history, timed."""
        start = time.perf_counter_ns()
        self._fill(bitmask, row)
        times.observe_ns(time.perf_counter_ns() - start)

    def _check_bitmask(self, bitmask: torch.Tensor, last_row: int) -> None:
        words = (self.vocab_size + 31) // 32
        if bitmask.dtype != torch.int32 or bitmask.dim() != 2 or bitmask.shape[1] != words:
            raise ValueError(
                f"bitmask must be int32 [rows, {words}], got {bitmask.dtype} "
                f"{list(bitmask.shape)}"
            )
        if bitmask.device.type != "cpu" or not bitmask.is_contiguous():
            raise ValueError("bitmask must be a contiguous CPU tensor")
        if not 0 <= last_row < bitmask.shape[0]:
            raise ValueError(f"row {last_row} out of range for {bitmask.shape[0]} rows")

    def _fill_stop_only(self, bitmask: torch.Tensor, row: int) -> None:
        allow_only_(bitmask, row, self.stop_token_ids)
