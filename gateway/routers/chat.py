"""`POST /v1/chat/completions`: messages → chat template → engine, with structured output,
tools (parsed into `tool_calls`), predictions, n choices and SSE streaming in OpenAI's
chunk shape. Validation and grammar errors are 400s before anything runs; a client that
disconnects cancels its generations. Knows nothing of how tokens are produced."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse

from engine import TokenDelta
from gateway import sql_answers
from gateway.generation import ChoiceResult
from gateway.limits import check_unsupported, sampling_for_choices
from gateway.prompting import encode_text, render_chat
from gateway.protocol import responses as R
from gateway.protocol.chat import ChatCompletionRequest
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
from gateway.tool_stream import ToolCallStream

router = APIRouter(dependencies=[Depends(require_api_key)])
ENDPOINT = "chat"


def _wants_tool_parsing(body: ChatCompletionRequest) -> bool:
    return bool(body.tools) and body.tool_choice != "none"


@router.post("/v1/chat/completions", response_model=None)
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Any:
    state = get_state(request)
    started = time.perf_counter()
    state.check_model(body.model)
    check_unsupported(body)
    prompt_text = render_chat(state.tokenizer, body.template_messages(), body.tool_dicts())
    prompt_ids = encode_text(state.tokenizer, prompt_text)
    max_param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    samplings = sampling_for_choices(
        body,
        requested_max_tokens=body.effective_max_tokens(),
        max_tokens_param=max_param,
        prompt_tokens=len(prompt_ids),
        max_model_len=state.engine.max_model_len,
        settings=state.settings,
        prompt_param="messages",
    )
    raw = body.model_dump(mode="json", exclude_unset=True)
    sql_answers.check_policy(raw, stream=bool(body.stream))
    grammar = await compile_for_request(raw, compiler=state.engine.grammar_compiler, metrics=state.metrics)
    request_id = R.random_id("chatcmpl-")
    prediction = body.prediction.text() if body.prediction is not None else None
    runs = start_runs(
        state, request_id=request_id, prompt_ids=prompt_ids, samplings=samplings,
        grammar=grammar, prediction=prediction,
    )
    state.metrics.in_flight.inc(len(runs))
    if body.stream:
        try:
            stream, first = await open_stream(runs, state, prompt_param="messages")
        except BaseException:
            state.metrics.in_flight.dec(len(runs))
            raise
        gen = _stream_chat(
            state, body, grammar, runs=runs, stream=stream, first=first, request_id=request_id,
            prompt_tokens=len(prompt_ids), started=started,
        )
        return StreamingResponse(gen, media_type="text/event-stream", headers=SSE_HEADERS)
    results = await collect_results(
        state, runs=runs, is_disconnected=request.is_disconnected, endpoint=ENDPOINT,
        prompt_tokens=len(prompt_ids), started=started, prompt_param="messages",
    )
    results, attempts = await sql_answers.apply_policy(raw, grammar, results, samplings, rerun=_rerun_choice(
        state, request, request_id=request_id, prompt_ids=prompt_ids, grammar=grammar, prediction=prediction))
    choices = [_final_choice(body, res) for res in results]
    for choice, res, tries in zip(choices, results, attempts, strict=True):
        if (sql := sql_answers.verdict(grammar, res.text, attempts=tries)) is not None:
            choice["sql"] = sql
    usage = R.usage([r.stats for r in results if r.stats], prompt_tokens=len(prompt_ids), with_prediction=prediction is not None)
    return JSONResponse(
        R.chat_completion(request_id=request_id, created=R.now(), model=state.model_id, choices=choices, usage=usage)
    )


def _rerun_choice(state: GatewayState, request: Request, **start: Any) -> sql_answers.Rerun:
    """One more generation of choice `index` (the SQL retry policy), run to completion."""

    async def rerun(index: int, sampling: Any) -> ChoiceResult:
        runs = start_runs(state, samplings=[sampling], **start)
        state.metrics.in_flight.inc(1)
        [result] = await collect_results(
            state, runs=runs, is_disconnected=request.is_disconnected, endpoint=ENDPOINT,
            prompt_tokens=len(start["prompt_ids"]), started=time.perf_counter(), prompt_param="messages",
        )
        result.index = index
        return result

    return rerun


def _finish_reason(engine_reason: str, has_calls: bool) -> str:
    return "tool_calls" if has_calls and engine_reason == "stop" else engine_reason


def _final_choice(body: ChatCompletionRequest, res: ChoiceResult) -> dict[str, Any]:
    if not _wants_tool_parsing(body):
        return R.chat_choice(index=res.index, content=res.text, tool_calls=None, finish_reason=res.finish_reason)
    parser = ToolCallStream()
    parser.feed(res.text)
    parser.finish()
    calls = [R.tool_call(call_id=c.id, name=c.name, arguments=c.arguments) for c in parser.calls]
    return R.chat_choice(
        index=res.index,
        content=parser.content,
        tool_calls=calls or None,
        finish_reason=_finish_reason(res.finish_reason, bool(calls)),
    )


async def _stream_chat(
    state: GatewayState,
    body: ChatCompletionRequest,
    grammar: Any,
    *,
    runs: list[Any],
    stream: AsyncIterator[tuple[int, TokenDelta]],
    first: tuple[int, TokenDelta] | None,
    request_id: str,
    prompt_tokens: int,
    started: float,
) -> AsyncIterator[str]:
    created = R.now()
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    parse_tools = _wants_tool_parsing(body)
    parsers = [ToolCallStream() if parse_tools else None for _ in runs]

    def chunk(index: int, delta: dict[str, Any], finish_reason: str | None = None) -> str:
        choice = R.chunk_choice(index=index, delta=delta, finish_reason=finish_reason)
        if finish_reason is not None and (sql := sql_answers.verdict(grammar, runs[index].result.text)):
            choice["sql"] = sql
        return sse(
            R.chat_chunk(
                request_id=request_id, created=created, model=state.model_id,
                choices=[choice], include_usage_key=include_usage,
            )
        )

    def on_delta(index: int, delta: TokenDelta) -> list[str]:
        out: list[str] = []
        parser = parsers[index]
        pieces = [parser.feed(delta.text)] if parser is not None else []
        if delta.finish_reason is not None and parser is not None:
            pieces.append(parser.finish())
        if parser is None and delta.text:
            out.append(chunk(index, {"content": delta.text}))
        for events in pieces:
            if events.content:
                out.append(chunk(index, {"content": events.content}))
            for call_delta in events.tool_call_deltas:
                out.append(chunk(index, {"tool_calls": [call_delta]}))
        if delta.finish_reason is not None:
            has_calls = parser is not None and bool(parser.calls)
            out.append(chunk(index, {}, _finish_reason(delta.finish_reason, has_calls)))
        return out

    def usage_chunk(results: list[ChoiceResult]) -> str:
        usage = R.usage(
            [r.stats for r in results if r.stats], prompt_tokens=prompt_tokens,
            with_prediction=body.prediction is not None,
        )
        return sse(R.chat_chunk(request_id=request_id, created=created, model=state.model_id, choices=[], usage=usage))

    async for line in stream_sse(
        state, runs=runs, stream=stream, first=first, endpoint=ENDPOINT,
        prompt_tokens=prompt_tokens, started=started, prompt_param="messages",
        head=[chunk(run.index, {"role": "assistant", "content": "", "refusal": None}) for run in runs],
        on_delta=on_delta, usage_chunk=usage_chunk if include_usage else None,
    ):
        yield line
