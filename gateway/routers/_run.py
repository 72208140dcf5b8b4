"""The one skeleton of the generating routers (chat and text completions).

`RequestContext` carries what every step needs (state, endpoint, the prompt's request field,
ids, prompt tokens, start time); a router builds it, then hands `respond()` its body, the
choices' sampling options, the compiled grammar, and a `ResponseShape`: the only part that
differs between endpoints (the final JSON, the stream's head, per-delta chunks, the usage
chunk). `respond()` starts the choices, pre-fetches a stream's first delta (so overload /
prompt errors still get their HTTP status), maps engine exceptions to OpenAI errors, records
per-request metrics, and drives the SSE body. Knows nothing of chat vs. text shapes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from engine import GenerationRequest, SamplingOptions, TokenDelta
from gateway.engine_errors import to_api_error
from gateway.errors import APIError, error_payload
from gateway.generation import ChoiceResult, ChoiceRun, collect, merged
from gateway.limits import sampling_for_choices
from gateway.protocol import responses as R
from gateway.sse import DONE, SSE_HEADERS, sse
from gateway.state import GatewayState
from gateway.structured import compile_for_request

if TYPE_CHECKING:
    from gateway.protocol.sampling_fields import SamplingFields
    from grammars import CompiledGrammar


@dataclass
class RequestContext:
    """One generating HTTP request, as the skeleton and the response shapes see it."""

    state: GatewayState
    endpoint: str                 # metrics label: "chat" | "completions"
    prompt_param: str             # the request field errors about the prompt name
    request_id: str
    prompt_ids: list[int] = field(default_factory=list)
    tenant: str = ""              # whose history drafts it shares (gateway.security.tenant_of)
    started: float = field(default_factory=time.perf_counter)
    created: int = field(default_factory=R.now)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    def mapped(self, exc: BaseException) -> BaseException:
        """The OpenAI error for an engine exception (the exception itself if unmapped)."""
        settings = self.state.settings
        api_error = to_api_error(exc, retry_after_s=settings.retry_after_s, prompt_param=self.prompt_param,
                                 unavailable_retry_after_s=settings.unavailable_retry_after_s)
        return api_error if api_error is not None else exc


class ResponseShape(Protocol):
    """What an endpoint's responses look like; one instance per request (may keep state)."""

    def response(self, ctx: RequestContext, results: list[ChoiceResult]) -> dict[str, Any]: ...

    def stream_head(self, ctx: RequestContext, runs: list[ChoiceRun]) -> list[str]: ...

    def on_delta(self, ctx: RequestContext, index: int, delta: TokenDelta) -> list[str]: ...

    def usage_chunk(self, ctx: RequestContext, results: list[ChoiceResult]) -> str | None: ...


async def choices_for(
    ctx: RequestContext, body: SamplingFields, *, requested_max_tokens: int | None, max_tokens_param: str
) -> tuple[list[SamplingOptions], CompiledGrammar | None]:
    """Per-choice sampling options (limits enforced as 400s) and the request's compiled
    grammar (None without a constraint); call after `ctx.prompt_ids` is set."""
    state = ctx.state
    samplings = sampling_for_choices(
        body,
        requested_max_tokens=requested_max_tokens,
        max_tokens_param=max_tokens_param,
        prompt_tokens=ctx.prompt_tokens,
        max_model_len=state.engine.max_model_len,
        settings=state.settings,
        prompt_param=ctx.prompt_param,
    )
    raw = body.model_dump(mode="json", exclude_unset=True)
    grammar = await compile_for_request(raw, compiler=state.engine.grammar_compiler, metrics=state.metrics,
                                        timeout_s=state.settings.grammar_compile_timeout_s, heap=state.heap)
    return samplings, grammar


async def respond(
    ctx: RequestContext,
    *,
    request: Request,
    stream: bool,
    samplings: list[SamplingOptions],
    grammar: CompiledGrammar | None,
    prediction: str | None,
    shape: ResponseShape,
    revise: Callable[[list[ChoiceResult]], Awaitable[list[ChoiceResult]]] | None = None,
) -> Any:
    state = ctx.state
    runs = [
        ChoiceRun(
            state.engine,
            GenerationRequest(
                request_id=f"{ctx.request_id}-{i}",
                prompt_token_ids=list(ctx.prompt_ids),
                sampling=sampling,
                grammar=grammar,
                prediction=prediction,
                tenant=ctx.tenant,
            ),
            index=i,
            started=ctx.started,
        )
        for i, sampling in enumerate(samplings)
    ]
    state.metrics.in_flight.inc(len(runs))
    if stream:
        try:
            merged_stream, first = await _open_stream(ctx, runs)
        except BaseException:
            state.metrics.in_flight.dec(len(runs))
            raise
        body = _sse_body(ctx, runs=runs, stream=merged_stream, first=first, shape=shape)
        return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)
    try:
        results = await collect(runs, is_disconnected=request.is_disconnected)
    except asyncio.CancelledError:
        state.metrics.aborted.inc(len(runs))
        raise
    except Exception as exc:
        raise ctx.mapped(exc) from exc
    finally:
        state.metrics.in_flight.dec(len(runs))
    if revise is not None:  # e.g. the SQL retry policy (gateway.sql_answers)
        results = await revise(results)
    _record(ctx, results)
    return JSONResponse(shape.response(ctx, results))


async def _open_stream(
    ctx: RequestContext, runs: list[ChoiceRun]
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
        raise ctx.mapped(exc) from exc
    return stream, first


def _record(ctx: RequestContext, results: list[ChoiceResult]) -> None:
    metrics = ctx.state.metrics
    for res in results:
        stats = res.stats
        if res.finish_reason == R.DEAD_END:
            metrics.dead_ends.inc()
        metrics.record_generation(
            prompt_tokens=0,
            completion_tokens=stats.completion_tokens if stats else len(res.token_ids),
            draft_tokens=stats.draft_tokens if stats else 0,
            accepted_tokens=stats.accepted_tokens if stats else 0,
            steps=stats.steps if stats else 0,
        )
        if stats is not None:
            metrics.record_regions(drafts=stats.region_drafts, accepted=stats.region_accepted)
            for rows, fills in (("draft", stats.draft_mask_fills), ("target", stats.target_mask_fills)):
                if fills is not None:
                    metrics.record_mask_fills(grammar=stats.grammar, backend=stats.grammar_backend,
                                              rows=rows, fills=fills)
        if res.first_token_s is not None:
            metrics.ttft.labels(endpoint=ctx.endpoint).observe(res.first_token_s)
    metrics.prompt_tokens.inc(ctx.prompt_tokens)
    cached = [res.stats.cached_tokens for res in results if res.stats is not None]
    metrics.cached_prompt_tokens.inc(min(min(cached, default=0), ctx.prompt_tokens))
    metrics.latency.labels(endpoint=ctx.endpoint).observe(time.perf_counter() - ctx.started)


async def _sse_body(
    ctx: RequestContext,
    *,
    runs: list[ChoiceRun],
    stream: AsyncIterator[tuple[int, TokenDelta]],
    first: tuple[int, TokenDelta] | None,
    shape: ResponseShape,
) -> AsyncIterator[str]:
    """The SSE body of a streamed generation: the shape's head events, its events for every
    delta, then (if asked) the usage chunk and `[DONE]`. An error after the 200 header is
    reported in-band in OpenAI's error envelope; an early exit (client gone) counts the
    unfinished choices as aborted; the merged stream is always closed (cancelling them)."""
    state = ctx.state
    finished = False
    try:
        for line in shape.stream_head(ctx, runs):
            yield line
        if first is not None:
            for line in shape.on_delta(ctx, *first):
                yield line
            async for index, delta in stream:
                for line in shape.on_delta(ctx, index, delta):
                    yield line
        finished = True
        results = [run.result for run in runs]
        _record(ctx, results)
        usage_line = shape.usage_chunk(ctx, results)
        if usage_line is not None:
            yield usage_line
        yield DONE
    except Exception as exc:
        mapped = ctx.mapped(exc)
        yield sse(mapped.payload() if isinstance(mapped, APIError)
                  else error_payload(f"Internal error: {exc}", type="server_error"))
        yield DONE
    finally:
        if not finished:
            state.metrics.aborted.inc(sum(1 for r in runs if not r.finished))
        state.metrics.in_flight.dec(len(runs))
        await stream.aclose()  # type: ignore[attr-defined]
