"""Request fields shared by `/v1/chat/completions` and `/v1/completions`: sampling, stop,
limits, structured-output fields, and the OpenAI fields this gateway accepts but cannot honour.

Contract: unknown fields are refused (extra="forbid" → 400 naming the field); known fields
that we do not implement are accepted only at their default/neutral value, otherwise
`unsupported_fields()` names them so the router answers 400 — nothing is silently ignored.
Harmless metadata (user, metadata, store, service_tier, prompt_cache_key, …) is accepted.
Types are strict (`"yes"` is not a bool, `"2"` not an int; NaN and infinities are refused), so
a wrong JSON type in any field is a 400 naming it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    include_usage: bool = False
    include_obfuscation: bool = False  # we never add obfuscation padding; accepted either way
    continuous_usage_stats: bool = False  # vLLM extension; refused when true (not implemented)


class SamplingFields(BaseModel):
    """Fields common to chat and text completions."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    model: str
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    # specgate extension: a constrained answer is closed, valid, within max_tokens (changes the
    # output law in the last tokens; engine.torch_engine.decoder)
    close_within_max_tokens: bool = False

    # structured output (validated and compiled by `grammars`)
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_json: Any = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    guided_decoding_backend: str | None = None
    guided_whitespace_pattern: str | None = None

    # accepted only at their neutral value
    logprobs: Any = None
    top_logprobs: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    best_of: int | None = None

    # harmless metadata
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    safety_identifier: str | None = None

    def unsupported_fields(self) -> list[tuple[str, str]]:
        """`(field, reason)` for every field set to a value this gateway cannot honour."""
        out: list[tuple[str, str]] = []
        if self.logprobs not in (None, False, 0):
            out.append(("logprobs", "logprobs are not supported by this server"))
        if self.top_logprobs not in (None, 0):
            out.append(("top_logprobs", "logprobs are not supported by this server"))
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if value not in (None, 0, 0.0):
                out.append((name, f"{name} is not supported (only 0)"))
        if self.repetition_penalty not in (None, 1, 1.0):
            out.append(("repetition_penalty", "repetition_penalty is not supported (only 1)"))
        if self.logit_bias:
            out.append(("logit_bias", "logit_bias is not supported (only an empty map)"))
        if self.best_of not in (None, 1) and self.best_of != self.n:
            out.append(("best_of", "best_of is not supported (only best_of == n)"))
        if self.stream_options is not None:
            if not self.stream:
                out.append(("stream_options", "stream_options is only allowed when stream is true"))
            elif self.stream_options.continuous_usage_stats:
                out.append(
                    ("stream_options.continuous_usage_stats", "continuous usage stats are not supported")
                )
        return out

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)
