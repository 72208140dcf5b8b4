"""Engine exceptions → OpenAI errors: a prompt too long or a chat template that cannot render
the messages is a 400, a full queue a 429 with Retry-After, a dead or shut-down engine a 503
with Retry-After (`engine_unavailable`), a grammar dead end raised by an engine a 400
(`grammar_dead_end`; the torch engine instead ends the answer there, finish reason
"dead_end", see gateway.protocol.responses), any other failed generation (a drafter / matcher / tokenizer
error, out of memory) a 500 naming the cause. Anything else is left to the
app's generic 500 handler. Knows nothing of HTTP framing."""

from __future__ import annotations

from engine import (
    EngineDeadError,
    EngineOverloadedError,
    GenerationError,
    PromptTooLongError,
    UnsupportedRequestError,
)
from engine.prompts import ChatTemplateError
from gateway.errors import APIError
from sampler import MaskDeadEndError


def engine_unavailable(reason: str, *, retry_after_s: int) -> APIError:
    return APIError(f"The engine is unavailable ({reason}); retry after {retry_after_s} s.",
                    status_code=503, type="server_error", code="engine_unavailable",
                    headers={"Retry-After": str(retry_after_s)})


def to_api_error(
    exc: BaseException, *, retry_after_s: int, prompt_param: str, unavailable_retry_after_s: int = 5
) -> APIError | None:
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ChatTemplateError):
        return APIError(str(exc), param=prompt_param)
    if isinstance(exc, UnsupportedRequestError):
        return APIError(str(exc), param=exc.param, code="unsupported_parameter")
    if isinstance(exc, PromptTooLongError):
        return APIError(str(exc), param=prompt_param, code="context_length_exceeded")
    if isinstance(exc, EngineOverloadedError):
        return APIError(
            f"The server is overloaded ({exc}); retry after {retry_after_s} s.",
            status_code=429,
            type="rate_limit_error",
            code="rate_limit_exceeded",
            headers={"Retry-After": str(retry_after_s)},
        )
    if isinstance(exc, EngineDeadError):
        return engine_unavailable(str(exc), retry_after_s=unavailable_retry_after_s)
    if isinstance(exc, GenerationError) and isinstance(exc.cause, MaskDeadEndError):
        reason = str(exc).removeprefix("generation failed: ")
        return APIError(f"The output constraint reached a dead end: {reason}", code="grammar_dead_end")
    if isinstance(exc, GenerationError):
        reason = str(exc).removeprefix("generation failed: ")
        return APIError(f"Generation failed: {reason}", status_code=500, type="server_error", code="generation_failed")
    return None
