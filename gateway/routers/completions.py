"""`POST /v1/completions`: a text prompt (or token ids) → engine, with the same sampling and
structured-output fields as chat, n choices and SSE streaming (`text_completion` chunks).
The shared steps live in `gateway.routers._run`; this module supplies the prompt and the
text response shape. Knows nothing of how tokens are produced."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from engine import TokenDelta
from engine.prompts import encode_text
from gateway.generation import ChoiceResult, ChoiceRun
from gateway.limits import check_unsupported
from gateway.prompting import check_token_ids
from gateway.protocol import responses as R
from gateway.protocol.completions import CompletionRequest
from gateway.routers._run import RequestContext, choices_for, respond
from gateway.security import require_api_key
from gateway.sse import sse
from gateway.state import get_state

router = APIRouter(dependencies=[Depends(require_api_key)])


@router.post("/v1/completions", response_model=None)
async def create_completion(body: CompletionRequest, request: Request) -> Any:
    state = get_state(request)
    ctx = RequestContext(state=state, endpoint="completions", prompt_param="prompt", request_id=R.random_id("cmpl-"))
    state.check_model(body.model)
    check_unsupported(body)
    prompt = body.single_prompt()
    if isinstance(prompt, str):
        ctx.prompt_ids = encode_text(state.tokenizer, prompt) or [
            state.tokenizer.bos_token_id or state.tokenizer.eos_token_id
        ]
    else:
        ctx.prompt_ids = check_token_ids(list(prompt), vocab_size=state.vocab_size)
    samplings, grammar = await choices_for(
        ctx, body, requested_max_tokens=body.max_tokens, max_tokens_param="max_tokens"
    )
    return await respond(ctx, request=request, stream=body.stream, samplings=samplings, grammar=grammar,
                         prediction=None, shape=TextShape(body))


class TextShape:
    """`text_completion` objects, streamed as `text_completion` chunks."""

    def __init__(self, body: CompletionRequest) -> None:
        self.include_usage = bool(body.stream_options and body.stream_options.include_usage)

    def response(self, ctx: RequestContext, results: list[ChoiceResult]) -> dict[str, Any]:
        choices = [R.text_choice(index=r.index, text=r.text, finish_reason=r.finish_reason) for r in results]
        usage = R.usage([r.stats for r in results if r.stats], prompt_tokens=ctx.prompt_tokens)
        return R.text_completion(request_id=ctx.request_id, created=ctx.created, model=ctx.state.model_id,
                                 choices=choices, usage=usage)

    def stream_head(self, ctx: RequestContext, runs: list[ChoiceRun]) -> list[str]:
        return []

    def on_delta(self, ctx: RequestContext, index: int, delta: TokenDelta) -> list[str]:
        return [sse(R.text_completion(
            request_id=ctx.request_id, created=ctx.created, model=ctx.state.model_id,
            choices=[R.text_choice(index=index, text=delta.text, finish_reason=delta.finish_reason)],
            usage=None,
        ))]

    def usage_chunk(self, ctx: RequestContext, results: list[ChoiceResult]) -> str | None:
        if not self.include_usage:
            return None
        usage = R.usage([r.stats for r in results if r.stats], prompt_tokens=ctx.prompt_tokens)
        return sse(R.text_completion(request_id=ctx.request_id, created=ctx.created, model=ctx.state.model_id,
                                     choices=[], usage=usage))
