"""GrammarError: the one exception this package raises for bad grammars and bad requests.

Contract: `message` names what is wrong (a keyword and its JSON pointer, an unknown tool
name, the unsupported kind for a backend, a compile timeout); `param` is the request field
path the gateway reports back (OpenAI's `error.param`), or None when it is not a request
field. Knows nothing of HTTP status codes: the gateway maps GrammarError to a 400.
"""

from __future__ import annotations


class GrammarError(ValueError):
    """A grammar cannot be built, compiled or honoured as requested."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def __repr__(self) -> str:
        return f"GrammarError({self.message!r}, param={self.param!r})"
