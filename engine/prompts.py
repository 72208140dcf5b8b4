"""Prompts as the model sees them: chat messages rendered with the model's own chat template
and encoded into prompt token ids. Shared by the gateway and the benchmarks (both sit above
the engine), so both feed the model the very same ids.

Contract: `render_chat` calls `tokenizer.apply_chat_template(messages, tools=...,
add_generation_prompt=True, tokenize=False)`; `encode_text` then encodes with
`add_special_tokens=False` (the template already carries the special tokens). A template that
cannot render the messages raises `ChatTemplateError` (the gateway answers 400 naming
`messages`). Knows nothing of HTTP, engines or sampling.
"""

from __future__ import annotations

from typing import Any


class ChatTemplateError(ValueError):
    """The model's chat template could not render these messages."""


def render_chat(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=False
        )
    except Exception as exc:  # jinja errors from the model's template
        raise ChatTemplateError(f"The chat template could not render these messages: {exc}") from exc
    if not isinstance(text, str):
        raise ChatTemplateError("The chat template did not produce text.")
    return text


def encode_text(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))
