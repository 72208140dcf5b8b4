"""`POST /v1/completions`: a text prompt (or token ids) → engine, with the same sampling and
structured-output fields as chat, n choices and SSE streaming (`text_completion` chunks).
The shared steps live in `gateway.routers._run`; this module supplies the prompt and the
text response shape. A SQL constraint adds the same `sql` verdict as chat (gateway.sql_answers):
on every choice, on the last chunk of each streamed choice, and the opt-in retry policy.
Knows nothing of how tokens are produced."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from engine import TokenDelta
from engine.prompts import encode_text
from gateway import sql_answers
from gateway.generation import ChoiceResult, ChoiceRun
from gateway.limits import check_unsupported
from gateway.prompting import check_token_ids
from gateway.protocol import responses as R
from gateway.protocol.completions import CompletionRequest
from gateway.request_limits import check_request_shape
from gateway.routers._run import RequestContext, choices_for, respond
from gateway.security import require_api_key, tenant_of
from gateway.sse import sse
from gateway.state import get_state

router = APIRouter(dependencies=[Depends(require_api_key)])


@router.post("/v1/completions", response_model=None)
async def create_completion(body: CompletionRequest, request: Request) -> Any:
    state = get_state(request)
    ctx = RequestContext(state=state, endpoint="completions", prompt_param="prompt", request_id=R.random_id("cmpl-"),
                         tenant=tenant_of(request, body.user))
    state.check_model(body.model)
    check_unsupported(body)
    check_request_shape(body.model_dump(mode="json", exclude_unset=True), state.settings)
    prompt = body.single_prompt()
    if isinstance(prompt, str):
        ctx.prompt_ids = encode_text(state.tokenizer, prompt) or [
            state.tokenizer.bos_token_id or state.tokenizer.eos_token_id
        ]
    else:
        ctx.prompt_ids = check_token_ids(list(prompt), vocab_size=state.vocab_size)
    raw = body.model_dump(mode="json", exclude_unset=True)
    sql_answers.check_policy(raw, stream=bool(body.stream))
    samplings, grammar = await choices_for(
        ctx, body, requested_max_tokens=body.max_tokens, max_tokens_param="max_tokens"
    )
    shape = TextShape(body, grammar)
    return await respond(ctx, request=request, stream=body.stream, samplings=samplings, grammar=grammar,
                         prediction=None, shape=shape,
                         revise=sql_answers.reviser(raw, grammar, samplings, ctx, request, shape.attempts))


class TextShape:
    """`text_completion` objects, streamed as `text_completion` chunks; a SQL grammar adds the
    sqlite verdict as `choice["sql"]` (and on the chunk that carries `finish_reason`)."""

    def __init__(self, body: CompletionRequest, grammar: Any = None) -> None:
        self.include_usage = bool(body.stream_options and body.stream_options.include_usage)
        self.grammar = grammar
        self.attempts: dict[int, int] = {}
        self.texts: dict[int, str] = {}

    def _choice(self, res: ChoiceResult) -> dict[str, Any]:
        choice = R.text_choice(index=res.index, text=res.text, finish_reason=res.finish_reason)
        if (sql := sql_answers.verdict(self.grammar, res.text, attempts=self.attempts.get(res.index, 1))):
            choice["sql"] = sql
        return choice

    def response(self, ctx: RequestContext, results: list[ChoiceResult]) -> dict[str, Any]:
        choices = [self._choice(r) for r in results]
        usage = R.usage([r.stats for r in results if r.stats], prompt_tokens=ctx.prompt_tokens)
        return R.text_completion(request_id=ctx.request_id, created=ctx.created, model=ctx.state.model_id,
                                 choices=choices, usage=usage)

    def stream_head(self, ctx: RequestContext, runs: list[ChoiceRun]) -> list[str]:
        return []

    def on_delta(self, ctx: RequestContext, index: int, delta: TokenDelta) -> list[str]:
        self.texts[index] = self.texts.get(index, "") + delta.text
        choice = R.text_choice(index=index, text=delta.text, finish_reason=delta.finish_reason)
        if delta.finish_reason is not None and (
                sql := sql_answers.verdict(self.grammar, self.texts[index])):
            choice["sql"] = sql  # the last chunk of a streamed SQL choice carries the verdict
        return [sse(R.text_completion(
            request_id=ctx.request_id, created=ctx.created, model=ctx.state.model_id,
            choices=[choice], usage=None,
        ))]

    def usage_chunk(self, ctx: RequestContext, results: list[ChoiceResult]) -> str | None:
        if not self.include_usage:
            return None
        usage = R.usage([r.stats for r in results if r.stats], prompt_tokens=ctx.prompt_tokens)
        return sse(R.text_completion(request_id=ctx.request_id, created=ctx.created, model=ctx.state.model_id,
                                     choices=[], usage=usage))
