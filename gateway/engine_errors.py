"""Engine exceptions → OpenAI errors: a prompt too long or a chat template that cannot render
the messages is a 400, a full queue a 429 with
Retry-After, a failed generation (e.g. a grammar dead end) a 500 naming the cause.
Anything else is left to the app's generic 500 handler. Knows nothing of HTTP framing."""

from __future__ import annotations

from engine import EngineOverloadedError, GenerationError, PromptTooLongError
from engine.prompts import ChatTemplateError
from gateway.errors import APIError


def to_api_error(exc: BaseException, *, retry_after_s: int, prompt_param: str) -> APIError | None:
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ChatTemplateError):
        return APIError(str(exc), param=prompt_param)
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
    if isinstance(exc, GenerationError):
        return APIError(f"Generation failed: {exc}", status_code=500, type="server_error", code="generation_failed")
    return None
