"""Prompts: chat messages rendered with the model's own chat template, or a completion
prompt (text or token ids), turned into prompt token ids.

Contract: chat prompts come from `tokenizer.apply_chat_template(messages, tools=...,
add_generation_prompt=True, tokenize=False)` then `encode(..., add_special_tokens=False)`
(the template already carries the special tokens). A template error is a 400 naming
`messages`. Token-id prompts are checked against the vocabulary. Knows nothing of engines.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import APIError


def render_chat(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=False
        )
    except Exception as exc:  # jinja errors from the model's template
        raise APIError(f"The chat template could not render these messages: {exc}", param="messages") from exc
    if not isinstance(text, str):
        raise APIError("The chat template did not produce text.", param="messages")
    return text


def encode_text(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def check_token_ids(token_ids: list[int], *, vocab_size: int, param: str = "prompt") -> list[int]:
    if not token_ids:
        raise APIError("The prompt is empty.", param=param)
    bad = [t for t in token_ids if t < 0 or t >= vocab_size]
    if bad:
        raise APIError(f"Token id {bad[0]} is outside the vocabulary (0..{vocab_size - 1}).", param=param)
    return token_ids
