"""Shared request plumbing for the generating routers: start the choices, pre-fetch the
first delta of a stream (so overload / prompt errors still get their HTTP status), map
engine exceptions, record per-request metrics, and drive an SSE body. Knows nothing of chat
vs. text shapes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from engine import GenerationRequest, SamplingOptions, TokenDelta
from gateway.engine_errors import to_api_error
from gateway.errors import error_payload
from gateway.generation import ChoiceResult, ChoiceRun, collect, merged
from gateway.sse import DONE, sse
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


async def stream_sse(
    state: GatewayState,
    *,
    runs: list[ChoiceRun],
    stream: AsyncIterator[tuple[int, TokenDelta]],
    first: tuple[int, TokenDelta] | None,
    endpoint: str,
    prompt_tokens: int,
    started: float,
    prompt_param: str,
    head: list[str],
    on_delta: Callable[[int, TokenDelta], list[str]],
    usage_chunk: Callable[[list[ChoiceResult]], str] | None,
) -> AsyncIterator[str]:
    """The SSE body of a streamed generation: `head` events, then `on_delta`'s events for
    every delta, then (if asked) the usage chunk and `[DONE]`. An error after the 200 header
    is reported in-band in OpenAI's error envelope; an early exit (client gone) counts the
    unfinished choices as aborted; the merged stream is always closed (cancelling them)."""
    finished = False
    try:
        for line in head:
            yield line
        if first is not None:
            for line in on_delta(*first):
                yield line
            async for index, delta in stream:
                for line in on_delta(index, delta):
                    yield line
        finished = True
        results = [run.result for run in runs]
        record(state, endpoint=endpoint, results=results, prompt_tokens=prompt_tokens, started=started)
        if usage_chunk is not None:
            yield usage_chunk(results)
        yield DONE
    except Exception as exc:
        mapped = to_api_error(exc, retry_after_s=state.settings.retry_after_s, prompt_param=prompt_param)
        yield sse(mapped.payload() if mapped else error_payload(f"Internal error: {exc}", type="server_error"))
        yield DONE
    finally:
        if not finished:
            state.metrics.aborted.inc(sum(1 for r in runs if not r.finished))
        state.metrics.in_flight.dec(len(runs))
        await stream.aclose()  # type: ignore[attr-defined]


async def collect_results(
    state: GatewayState,
    *,
    runs: list[ChoiceRun],
    is_disconnected: Callable[[], Any],
    endpoint: str,
    prompt_tokens: int,
    started: float,
    prompt_param: str,
) -> list[ChoiceResult]:
    """Run every choice to completion (a non-streamed request), map engine errors to HTTP
    errors, count a cancelled request as aborted, and record the request's metrics."""
    try:
        results = await collect(runs, is_disconnected=is_disconnected)
    except asyncio.CancelledError:
        state.metrics.aborted.inc(len(runs))
        raise
    except Exception as exc:
        raise_mapped(exc, state, prompt_param=prompt_param)
        raise
    finally:
        state.metrics.in_flight.dec(len(runs))
    record(state, endpoint=endpoint, results=results, prompt_tokens=prompt_tokens, started=started)
    return results
