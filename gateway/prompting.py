"""Prompt validation at the HTTP edge: a completion prompt given as token ids is checked
against the vocabulary (400 naming `prompt`). Rendering and encoding live in
`engine.prompts` (shared with the benchmarks)."""

from __future__ import annotations

from gateway.errors import APIError


def check_token_ids(token_ids: list[int], *, vocab_size: int, param: str = "prompt") -> list[int]:
    if not token_ids:
        raise APIError("The prompt is empty.", param=param)
    bad = [t for t in token_ids if t < 0 or t >= vocab_size]
    if bad:
        raise APIError(f"Token id {bad[0]} is outside the vocabulary (0..{vocab_size - 1}).", param=param)
    return token_ids
