"""`POST /v1/completions`: a text prompt (or token ids) → engine, with the same sampling and
structured-output fields as chat, n choices and SSE streaming (`text_completion` chunks).
Knows nothing of how tokens are produced."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse

from engine import TokenDelta
from gateway.generation import ChoiceResult, ChoiceRun
from gateway.limits import check_unsupported, sampling_for_choices
from gateway.prompting import check_token_ids, encode_text
from gateway.protocol import responses as R
from gateway.protocol.completions import CompletionRequest
from gateway.routers._run import (
    collect_results,
    open_stream,
    start_runs,
    stream_sse,
)
from gateway.security import require_api_key
from gateway.sse import SSE_HEADERS, sse
from gateway.state import GatewayState, get_state
from gateway.structured import compile_for_request

router = APIRouter(dependencies=[Depends(require_api_key)])
ENDPOINT = "completions"


@router.post("/v1/completions", response_model=None)
async def create_completion(body: CompletionRequest, request: Request) -> Any:
    state = get_state(request)
    started = time.perf_counter()
    state.check_model(body.model)
    check_unsupported(body)
    prompt = body.single_prompt()
    if isinstance(prompt, str):
        prompt_ids = encode_text(state.tokenizer, prompt)
        if not prompt_ids:
            prompt_ids = [state.tokenizer.bos_token_id or state.tokenizer.eos_token_id]
    else:
        prompt_ids = check_token_ids(list(prompt), vocab_size=state.vocab_size)
    samplings = sampling_for_choices(
        body,
        requested_max_tokens=body.max_tokens,
        max_tokens_param="max_tokens",
        prompt_tokens=len(prompt_ids),
        max_model_len=state.engine.max_model_len,
        settings=state.settings,
        prompt_param="prompt",
    )
    raw = body.model_dump(mode="json", exclude_unset=True)
    grammar = await compile_for_request(raw, compiler=state.engine.grammar_compiler, metrics=state.metrics)
    request_id = R.random_id("cmpl-")
    runs = start_runs(state, request_id=request_id, prompt_ids=prompt_ids, samplings=samplings,
                      grammar=grammar, prediction=None)
    state.metrics.in_flight.inc(len(runs))
    if body.stream:
        try:
            stream, first = await open_stream(runs, state, prompt_param="prompt")
        except BaseException:
            state.metrics.in_flight.dec(len(runs))
            raise
        gen = _stream_completion(state, body, runs=runs, stream=stream, first=first, request_id=request_id,
                                 prompt_tokens=len(prompt_ids), started=started)
        return StreamingResponse(gen, media_type="text/event-stream", headers=SSE_HEADERS)
    results = await collect_results(
        state, runs=runs, is_disconnected=request.is_disconnected, endpoint=ENDPOINT,
        prompt_tokens=len(prompt_ids), started=started, prompt_param="prompt",
    )
    choices = [R.text_choice(index=r.index, text=r.text, finish_reason=r.finish_reason) for r in results]
    usage = R.usage([r.stats for r in results if r.stats], prompt_tokens=len(prompt_ids))
    return JSONResponse(
        R.text_completion(request_id=request_id, created=R.now(), model=state.model_id, choices=choices, usage=usage)
    )


async def _stream_completion(
    state: GatewayState,
    body: CompletionRequest,
    *,
    runs: list[ChoiceRun],
    stream: AsyncIterator[tuple[int, TokenDelta]],
    first: tuple[int, TokenDelta] | None,
    request_id: str,
    prompt_tokens: int,
    started: float,
) -> AsyncIterator[str]:
    created = R.now()
    include_usage = bool(body.stream_options and body.stream_options.include_usage)

    def chunk(index: int, delta: TokenDelta) -> str:
        return sse(R.text_completion(
            request_id=request_id, created=created, model=state.model_id,
            choices=[R.text_choice(index=index, text=delta.text, finish_reason=delta.finish_reason)],
            usage=None,
        ))

    def usage_chunk(results: list[ChoiceResult]) -> str:
        usage = R.usage([r.stats for r in results if r.stats], prompt_tokens=prompt_tokens)
        return sse(R.text_completion(request_id=request_id, created=created, model=state.model_id,
                                     choices=[], usage=usage))

    async for line in stream_sse(
        state, runs=runs, stream=stream, first=first, endpoint=ENDPOINT,
        prompt_tokens=prompt_tokens, started=started, prompt_param="prompt",
        head=[], on_delta=lambda index, delta: [chunk(index, delta)],
        usage_chunk=usage_chunk if include_usage else None,
    ):
        yield line
