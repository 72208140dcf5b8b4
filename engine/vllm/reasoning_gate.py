"""ReasoningGate: vLLM's reasoning-end rule for one request, replayed in the worker.

With a reasoning parser configured (`structured_outputs_config.reasoning_parser`) and
`enable_in_reasoning` off, vLLM's scheduler (StructuredOutputManager, vLLM 0.32 and 0.34) leaves a
request unconstrained while it reasons and starts the grammar after the reasoning end
(`</think>` for Qwen3; an implicit end such as `<tool_call>` is itself fed to the grammar).
The draft mask must start at exactly the same token, so the worker asks the scheduler's own
function, `StructuredOutputManager._get_constraint_bounds`, the same questions the
scheduler asks, on a stand-in request holding the same tokens and a reasoner of the same
class built with the same per-request kwargs:

- `ended`: the grammar runs on the committed tokens (as the scheduler's bitmask fill sees it:
  `constraint_start == 0` for no speculative tokens), e.g. a prompt that already ends
  the reasoning.
- `commit(tokens)`: one step's accepted tokens (the scheduler's `accept_tokens`): returns the
  index in `tokens` from which the grammar takes them (the end latches `ended`), or None
  while the request still reasons.
- `draft_bounds(drafts)`: for uncommitted drafts d0..dn-1 after the committed tokens,
  `(grammar_start, constraint_start)`: draft row i (the row that samples d_i) is masked iff
  i >= constraint_start, and the grammar takes the drafts from grammar_start on. Both are
  n + 1 when the drafts do not end the reasoning. For a row i only d0..d(i-1) are known;
  the bounds of that prefix decide the row the same way as the full chain's do.
- `reset()`: back to the request's start (a resync replays the history as one commit; the
  scheduler committed it step by step, which gives the same answer for parsers that look
  for an end token, such as Qwen3's).

Invariants: the scheduler's latch (`reasoning_ended`) is mirrored, including its initial
value from the frontend (None: decided from the prompt). Knows nothing of the draft mask or
the matchers; imports vLLM only when a gate is built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _StructuredRequest:  # the fields of vLLM's StructuredOutputRequest the rule reads
    reasoning_ended: bool | None = None


@dataclass
class _Request:  # the fields of vLLM's Request the rule reads
    prompt_token_ids: list[int]
    all_token_ids: list[int]
    structured_output_request: _StructuredRequest = field(default_factory=_StructuredRequest)

    @property
    def _all_token_ids(self) -> list[int]:  # vLLM >= 0.34 reads the buffer behind all_token_ids
        return self.all_token_ids


class _Manager:  # the StructuredOutputManager attributes the rule reads
    enable_in_reasoning = False

    def __init__(self, reasoner: Callable[[], Any]) -> None:
        self._make = reasoner
        self._reasoner: Any = None

    def _get_reasoner(self, request: Any) -> Any:
        if self._reasoner is None:
            self._reasoner = self._make()
        return self._reasoner


class ReasoningGate:
    def __init__(
        self,
        *,
        reasoner: Callable[[], Any],
        prompt_token_ids: Sequence[int],
        reasoning_ended: bool | None = None,
    ) -> None:
        from vllm.v1.structured_output import StructuredOutputManager

        self._bounds_fn = StructuredOutputManager._get_constraint_bounds
        self._reasoner = reasoner
        self._prompt = [int(t) for t in prompt_token_ids]
        self._initial = reasoning_ended
        self.ended = False
        self.reset()

    def reset(self) -> None:
        # a fresh reasoner too: parsers may keep per-request streaming state
        self._manager = _Manager(self._reasoner)
        self._request = _Request(prompt_token_ids=list(self._prompt), all_token_ids=list(self._prompt),
                                 structured_output_request=_StructuredRequest(self._initial))
        self.ended = self._bounds(())[1] == 0

    def _bounds(self, tokens: Sequence[int], *, committed: bool = False) -> tuple[int, int]:
        g, c = self._bounds_fn(self._manager, self._request, list(tokens),  # type: ignore[arg-type]
                               spec_tokens_committed=committed)
        return int(g), int(c)

    def commit(self, tokens: Sequence[int]) -> int | None:
        tokens = [int(t) for t in tokens]
        self._request.all_token_ids.extend(tokens)
        if self.ended:
            return 0
        if not tokens:
            return None
        g, _ = self._bounds(tokens, committed=True)
        if g > len(tokens):
            return None
        self._request.structured_output_request.reasoning_ended = True
        self.ended = True
        return g

    def draft_bounds(self, drafts: Sequence[int]) -> tuple[int, int]:
        if self.ended:
            return 0, 0
        return self._bounds([int(t) for t in drafts])
