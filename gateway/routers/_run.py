"""Shared request plumbing for the generating routers: start the choices, pre-fetch the
first delta of a stream (so overload / prompt errors still get their HTTP status), map
engine exceptions, and record per-request metrics. Knows nothing of chat vs. text shapes."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from engine import GenerationRequest, SamplingOptions, TokenDelta
from gateway.engine_errors import to_api_error
from gateway.generation import ChoiceResult, ChoiceRun, merged
from gateway.state import GatewayState


def start_runs(
    state: GatewayState,
    *,
    request_id: str,
    prompt_ids: list[int],
    samplings: list[SamplingOptions],
    grammar: Any,
    prediction: str | None,
) -> list[ChoiceRun]:
    started = time.perf_counter()
    return [
        ChoiceRun(
            state.engine,
            GenerationRequest(
                request_id=f"{request_id}-{i}",
                prompt_token_ids=list(prompt_ids),
                sampling=sampling,
                grammar=grammar,
                prediction=prediction,
            ),
            index=i,
            started=started,
        )
        for i, sampling in enumerate(samplings)
    ]


def raise_mapped(exc: BaseException, state: GatewayState, *, prompt_param: str) -> None:
    mapped = to_api_error(exc, retry_after_s=state.settings.retry_after_s, prompt_param=prompt_param)
    if mapped is not None:
        raise mapped from exc
    raise exc


async def open_stream(
    runs: list[ChoiceRun], state: GatewayState, *, prompt_param: str
) -> tuple[AsyncIterator[tuple[int, TokenDelta]], tuple[int, TokenDelta] | None]:
    """The merged stream and its first item (None if it ended at once); errors raised here
    are mapped to HTTP errors before any byte is sent."""
    stream = merged(runs)
    try:
        first = await stream.__anext__()
    except StopAsyncIteration:
        return stream, None
    except Exception as exc:
        await stream.aclose()  # type: ignore[attr-defined]
        raise_mapped(exc, state, prompt_param=prompt_param)
        raise
    return stream, first


def record(state: GatewayState, *, endpoint: str, results: list[ChoiceResult], prompt_tokens: int, started: float) -> None:
    metrics = state.metrics
    for res in results:
        stats = res.stats
        metrics.record_generation(
            prompt_tokens=0,
            completion_tokens=stats.completion_tokens if stats else len(res.token_ids),
            draft_tokens=stats.draft_tokens if stats else 0,
            accepted_tokens=stats.accepted_tokens if stats else 0,
            steps=stats.steps if stats else 0,
        )
        if res.first_token_s is not None:
            metrics.ttft.labels(endpoint=endpoint).observe(res.first_token_s)
    metrics.prompt_tokens.inc(prompt_tokens)
    metrics.latency.labels(endpoint=endpoint).observe(time.perf_counter() - started)
