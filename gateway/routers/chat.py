"""`POST /v1/chat/completions`: messages → chat template → engine, with structured output,
tools (parsed into `tool_calls`), predictions, n choices and SSE streaming in OpenAI's
chunk shape. Validation and grammar errors are 400s before anything runs; a client that
disconnects cancels its generations. The shared steps live in `gateway.routers._run`; this
module supplies the prompt and the chat response shape. Knows nothing of how tokens are
produced."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from engine import TokenDelta
from engine.prompts import ChatTemplateError, encode_text, render_chat
from gateway import sql_answers
from gateway.generation import ChoiceResult, ChoiceRun
from gateway.limits import check_unsupported
from gateway.protocol import responses as R
from gateway.protocol.chat import ChatCompletionRequest
from gateway.request_limits import check_request_shape
from gateway.routers._run import RequestContext, choices_for, respond
from gateway.security import require_api_key, tenant_of
from gateway.sse import sse
from gateway.state import get_state
from gateway.tool_stream import ToolCallStream

router = APIRouter(dependencies=[Depends(require_api_key)])


@router.post("/v1/chat/completions", response_model=None)
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Any:
    state = get_state(request)
    ctx = RequestContext(state=state, endpoint="chat", prompt_param="messages", request_id=R.random_id("chatcmpl-"),
                         tenant=tenant_of(request, body.user))
    state.check_model(body.model)
    check_unsupported(body)
    check_request_shape(body.model_dump(mode="json", exclude_unset=True), state.settings)
    try:
        prompt_text = render_chat(state.tokenizer, body.template_messages(), body.tool_dicts())
    except ChatTemplateError as exc:
        raise ctx.mapped(exc) from exc
    ctx.prompt_ids = encode_text(state.tokenizer, prompt_text)
    max_param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    raw = body.model_dump(mode="json", exclude_unset=True)
    sql_answers.check_policy(raw, stream=bool(body.stream))
    samplings, grammar = await choices_for(
        ctx, body, requested_max_tokens=body.effective_max_tokens(), max_tokens_param=max_param
    )
    shape = ChatShape(body, grammar)
    return await respond(
        ctx, request=request, stream=body.stream, samplings=samplings, grammar=grammar,
        prediction=body.prediction.text() if body.prediction is not None else None,
        shape=shape, revise=sql_answers.reviser(raw, grammar, samplings, ctx, request, shape.attempts),
    )


def _finish_reason(engine_reason: str, has_calls: bool) -> str:
    return "tool_calls" if has_calls and engine_reason == "stop" else engine_reason


class ChatShape:
    """`chat.completion` objects and `chat.completion.chunk` streams; tool calls parsed out
    of the text when the request has tools (and `tool_choice` is not "none")."""

    def __init__(self, body: ChatCompletionRequest, grammar: Any = None) -> None:
        self.body = body
        self.grammar = grammar  # a SQL grammar adds the sqlite verdict (gateway.sql_answers)
        self.attempts: dict[int, int] = {}
        self.texts: dict[int, str] = {}
        self.parse_tools = bool(body.tools) and body.tool_choice != "none"
        self.tool_names = [tool["function"]["name"] for tool in body.tool_dicts() or []]
        self.include_usage = bool(body.stream_options and body.stream_options.include_usage)
        self.parsers: dict[int, ToolCallStream] = {}

    def _usage(self, ctx: RequestContext, results: list[ChoiceResult]) -> dict[str, Any]:
        return R.usage([r.stats for r in results if r.stats], prompt_tokens=ctx.prompt_tokens,
                       with_prediction=self.body.prediction is not None)

    def _choice(self, res: ChoiceResult) -> dict[str, Any]:
        choice = self._plain_choice(res)
        if (sql := sql_answers.verdict(self.grammar, res.text, attempts=self.attempts.get(res.index, 1))):
            choice["sql"] = sql
        return choice

    def _plain_choice(self, res: ChoiceResult) -> dict[str, Any]:
        if not self.parse_tools:
            return R.chat_choice(index=res.index, content=res.text, tool_calls=None, finish_reason=res.finish_reason)
        parser = ToolCallStream(self.tool_names)
        parser.feed(res.text)
        parser.finish()
        calls = [R.tool_call(call_id=c.id, name=c.name, arguments=c.arguments) for c in parser.calls]
        return R.chat_choice(
            index=res.index, content=parser.content, tool_calls=calls or None,
            finish_reason=_finish_reason(res.finish_reason, bool(calls)),
        )

    def response(self, ctx: RequestContext, results: list[ChoiceResult]) -> dict[str, Any]:
        return R.chat_completion(
            request_id=ctx.request_id, created=ctx.created, model=ctx.state.model_id,
            choices=[self._choice(res) for res in results], usage=self._usage(ctx, results),
        )

    def _chunk(self, ctx: RequestContext, index: int, delta: dict[str, Any], finish_reason: str | None = None) -> str:
        choice = R.chunk_choice(index=index, delta=delta, finish_reason=finish_reason)
        if finish_reason is not None and (sql := sql_answers.verdict(self.grammar, self.texts.get(index, ""))):
            choice["sql"] = sql  # the last chunk of a streamed SQL choice carries the verdict
        return sse(R.chat_chunk(
            request_id=ctx.request_id, created=ctx.created, model=ctx.state.model_id,
            choices=[choice], include_usage_key=self.include_usage,
        ))

    def stream_head(self, ctx: RequestContext, runs: list[ChoiceRun]) -> list[str]:
        return [self._chunk(ctx, run.index, {"role": "assistant", "content": "", "refusal": None}) for run in runs]

    def on_delta(self, ctx: RequestContext, index: int, delta: TokenDelta) -> list[str]:
        out: list[str] = []
        self.texts[index] = self.texts.get(index, "") + delta.text
        parser = self.parsers.setdefault(index, ToolCallStream(self.tool_names)) if self.parse_tools else None
        if parser is None:
            if delta.text:
                out.append(self._chunk(ctx, index, {"content": delta.text}))
        else:
            pieces = [parser.feed(delta.text)]
            if delta.finish_reason is not None:
                pieces.append(parser.finish())
            for events in pieces:
                if events.content:
                    out.append(self._chunk(ctx, index, {"content": events.content}))
                for call_delta in events.tool_call_deltas:
                    out.append(self._chunk(ctx, index, {"tool_calls": [call_delta]}))
        if delta.finish_reason is not None:
            has_calls = parser is not None and bool(parser.calls)
            out.append(self._chunk(ctx, index, {}, _finish_reason(delta.finish_reason, has_calls)))
        return out

    def usage_chunk(self, ctx: RequestContext, results: list[ChoiceResult]) -> str | None:
        if not self.include_usage:
            return None
        return sse(R.chat_chunk(request_id=ctx.request_id, created=ctx.created, model=ctx.state.model_id,
                                choices=[], usage=self._usage(ctx, results)))
