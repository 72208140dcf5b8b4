"""Request limits and sampling translation: OpenAI fields → `engine.SamplingOptions` per
choice, with the gateway's caps enforced as 400s naming the field.

Contract: `n` ≤ `max_n`; `max_tokens` ≤ `max_tokens_cap`; the prompt plus the requested
`max_tokens` must fit `max_model_len` (an unrequested `max_tokens` is shrunk to fit
instead); choice i gets seed `seed + i` (or no seed). Knows nothing of HTTP or grammars.
"""

from __future__ import annotations

from engine import SamplingOptions
from gateway.errors import APIError
from gateway.protocol.sampling_fields import SamplingFields
from gateway.settings import GatewaySettings


def check_unsupported(body: SamplingFields) -> None:
    problems = body.unsupported_fields()
    if problems:
        param, reason = problems[0]
        raise APIError(f"Unsupported value for '{param}': {reason}.", param=param, code="unsupported_parameter")


def check_prompt_fits(prompt_tokens: int, *, max_model_len: int, param: str) -> None:
    if prompt_tokens >= max_model_len:
        raise APIError(
            f"This model's maximum context length is {max_model_len} tokens; your prompt has "
            f"{prompt_tokens} tokens, leaving no room for output.",
            param=param,
            code="context_length_exceeded",
        )


def sampling_for_choices(
    body: SamplingFields,
    *,
    requested_max_tokens: int | None,
    max_tokens_param: str,
    prompt_tokens: int,
    max_model_len: int,
    settings: GatewaySettings,
    prompt_param: str,
) -> list[SamplingOptions]:
    if body.n > settings.max_n:
        raise APIError(f"n must be at most {settings.max_n}, got {body.n}.", param="n", code="invalid_value")
    check_prompt_fits(prompt_tokens, max_model_len=max_model_len, param=prompt_param)
    room = max_model_len - prompt_tokens
    if requested_max_tokens is None:
        max_tokens = min(settings.default_max_tokens, settings.max_tokens_cap, room)
    else:
        if requested_max_tokens > settings.max_tokens_cap:
            raise APIError(
                f"{max_tokens_param} must be at most {settings.max_tokens_cap}, got {requested_max_tokens}.",
                param=max_tokens_param,
                code="invalid_value",
            )
        if requested_max_tokens > room:
            raise APIError(
                f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                f"{prompt_tokens + requested_max_tokens} tokens ({prompt_tokens} in the prompt, "
                f"{requested_max_tokens} for the completion).",
                param=max_tokens_param,
                code="context_length_exceeded",
            )
        max_tokens = requested_max_tokens
    stop = tuple(body.stop_list())
    if any(not s for s in stop):
        raise APIError("stop strings must not be empty.", param="stop", code="invalid_value")
    top_k = body.top_k if body.top_k is not None and body.top_k > 0 else 0
    return [
        SamplingOptions(
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            top_k=top_k,
            min_p=0.0 if body.min_p is None else body.min_p,
            seed=None if body.seed is None else body.seed + i,
            max_tokens=max_tokens,
            stop=stop,
            ignore_eos=body.ignore_eos,
            close_within_max_tokens=body.close_within_max_tokens,
        )
        for i in range(body.n)
    ]
