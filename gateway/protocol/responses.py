"""Builders for OpenAI response objects (plain dicts, exactly OpenAI's shapes).

`usage()` folds per-choice engine statistics into `CompletionUsage` plus the specgate
extension `usage.speculative = {proposed_tokens, draft_tokens (verified), accepted_tokens,
acceptance_rate (accepted / proposed), steps}` and `usage.closing_tokens` (the tokens a closing
wrote under `close_within_max_tokens`, summed over the choices);
with a `prediction`, `completion_tokens_details.accepted_prediction_tokens` /
`rejected_prediction_tokens` count the predicted drafts (grammar-forced drafts excluded)
that were accepted / rejected; `prompt_tokens_details.cached_tokens` counts the prompt tokens
served from the engine's prefix cache (the fewest over the choices: the prompt is counted
once). A choice the engine ended at a grammar dead end (engine finish reason "dead_end")
carries the text it has, `finish_reason: "stop"` (OpenAI's enum has no value for it) and the
specgate extension `error: {"code": "grammar_dead_end", "message": ...}`, on the response's
choice and on the stream chunk that carries the finish reason. Knows nothing of engines
beyond the duck-typed `RequestStats` fields it reads.
"""

from __future__ import annotations

import secrets
import string
import time
from collections.abc import Sequence
from typing import Any, Protocol

_ALPHABET = string.ascii_letters + string.digits


def random_id(prefix: str, length: int = 24) -> str:
    return prefix + "".join(secrets.choice(_ALPHABET) for _ in range(length))


def tool_call_id() -> str:
    return random_id("call_")


def now() -> int:
    return int(time.time())


DEAD_END = "dead_end"  # the engine's finish reason for a grammar dead end
DEAD_END_ERROR = {
    "code": "grammar_dead_end",
    "message": "The output constraint reached a dead end (the grammar allowed no next token): "
               "the answer ends here, incomplete.",
}


def _finished(choice: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
    if finish_reason == DEAD_END:
        choice["finish_reason"] = "stop"
        choice["error"] = dict(DEAD_END_ERROR)
    else:
        choice["finish_reason"] = finish_reason
    return choice


class StatsLike(Protocol):
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    proposed_tokens: int
    draft_tokens: int
    accepted_tokens: int
    forced_draft_tokens: int
    forced_accepted_tokens: int
    steps: int
    unmasked_steps: int
    closing_tokens: int
    region_drafts: dict[str, int]
    region_accepted: dict[str, int]


def usage(
    stats: Sequence[StatsLike],
    *,
    prompt_tokens: int,
    with_prediction: bool = False,
) -> dict[str, Any]:
    """Usage over the choices of one request (the prompt is counted once)."""
    completion = sum(s.completion_tokens for s in stats)
    drafted = sum(s.draft_tokens for s in stats)
    proposed = sum(max(s.proposed_tokens, s.draft_tokens) for s in stats)
    accepted = sum(s.accepted_tokens for s in stats)
    steps = sum(s.steps for s in stats)
    cached = min(min((s.cached_tokens for s in stats), default=0), prompt_tokens)
    details: dict[str, int] = {"reasoning_tokens": 0, "audio_tokens": 0}
    if with_prediction:  # predicted drafts: all but the grammar-forced ones
        predicted = drafted - sum(s.forced_draft_tokens for s in stats)
        predicted_accepted = accepted - sum(s.forced_accepted_tokens for s in stats)
        details["accepted_prediction_tokens"] = predicted_accepted
        details["rejected_prediction_tokens"] = predicted - predicted_accepted
    else:
        details["accepted_prediction_tokens"] = 0
        details["rejected_prediction_tokens"] = 0
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
        "completion_tokens_details": details,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "closing_tokens": sum(s.closing_tokens for s in stats),
        "speculative": {
            "proposed_tokens": proposed,
            "draft_tokens": drafted,
            "accepted_tokens": accepted,
            "acceptance_rate": (accepted / proposed) if proposed else 0.0,
            "steps": steps,
            "unmasked_steps": sum(s.unmasked_steps for s in stats),
            "regions": regions(stats),
        },
    }


def regions(stats: Sequence[StatsLike]) -> dict[str, dict[str, int]]:
    """Verified and accepted drafts per output region (`grammars.regions`), summed over choices."""
    out: dict[str, dict[str, int]] = {}
    for s in stats:
        for region, n in s.region_drafts.items():
            entry = out.setdefault(region, {"draft_tokens": 0, "accepted_tokens": 0})
            entry["draft_tokens"] += n
            entry["accepted_tokens"] += s.region_accepted.get(region, 0)
    return dict(sorted(out.items()))


def chat_completion(
    *, request_id: str, created: int, model: str, choices: list[dict[str, Any]], usage: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage,
        "system_fingerprint": "specgate",
    }


def chat_choice(
    *, index: int, content: str | None, tool_calls: list[dict[str, Any]] | None, finish_reason: str
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return _finished({"index": index, "message": message, "logprobs": None}, finish_reason)


def tool_call(*, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chat_chunk(
    *,
    request_id: str,
    created: int,
    model: str,
    choices: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    include_usage_key: bool = False,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": "specgate",
        "choices": choices,
    }
    if usage is not None or include_usage_key:
        out["usage"] = usage
    return out


def chunk_choice(*, index: int, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return _finished({"index": index, "delta": delta, "logprobs": None}, finish_reason)


def text_completion(
    *,
    request_id: str,
    created: int,
    model: str,
    choices: list[dict[str, Any]],
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": "specgate",
        "choices": choices,
    }
    if usage is not None:
        out["usage"] = usage
    return out


def text_choice(*, index: int, text: str, finish_reason: str | None) -> dict[str, Any]:
    return _finished({"index": index, "text": text, "logprobs": None}, finish_reason)


def model_card(model_id: str, *, created: int, root: str | None = None,
               weights: dict[str, str] | None = None) -> dict[str, Any]:
    """An OpenAI model object; `weights` (specgate's extension: kernels and dtype / quantization
    the engine runs) says when the served numbers are not the bf16 checkpoint's."""
    card: dict[str, Any] = {"id": model_id, "object": "model", "created": created, "owned_by": "specgate"}
    if root is not None:
        card["root"] = root
    if weights:
        card["specgate_weights"] = weights
    return card
