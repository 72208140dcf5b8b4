"""Errors raised by `engine.models`: each message names what is wrong and what to do.

This module knows nothing about how models are fetched or loaded.
"""

from __future__ import annotations


class ModelNotFoundError(LookupError):
    """A name is neither registered, nor a local model directory, nor reachable on a hub."""


class ModelNotPulledError(ModelNotFoundError):
    """A registered model is not in the cache and pulling was not allowed."""


class PullError(RuntimeError):
    """Fetching, assembling, verifying or converting a registered model failed.

    A failed pull leaves no model directory behind (the cache stays as it was).
    """


class TokenizerMismatchError(ValueError):
    """Draft and target tokenizers disagree; speculative decoding needs identical token ids."""
