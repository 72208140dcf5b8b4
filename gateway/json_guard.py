"""Strict JSON request bodies: a pure ASGI middleware that reads a POST body once, checks it,
and either answers 400 in OpenAI's envelope or replays the body to the app unchanged.

Refused (each a 400 naming what is wrong, never FastAPI's `{"detail": ...}`):
- bytes that are not UTF-8 (`invalid_encoding`, with the byte offset);
- malformed JSON, including raw control characters inside strings and integer literals
  past Python's 4300-digit limit (`invalid_json`);
- JSON nested deeper than `max_depth` (`invalid_json`; checked before parsing, so a hostile
  body never reaches the parser's recursion);
- a key repeated in one object (`duplicate_key`, naming the object's path);
- strings with lone UTF-16 surrogates (`\\ud800` escapes) or NUL characters (`invalid_value`,
  naming the field path).

Invariants: only `http` POST requests with a body are inspected; the app sees exactly the
bytes the client sent, then the original `receive` (so client disconnects still reach it);
the body size limit runs outside this middleware, so at most that many bytes are buffered.
Knows nothing of the API's fields.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import error_payload


class BadBody(Exception):
    def __init__(self, message: str, *, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param


def _path(parts: list[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise BadBody(f"Duplicate key '{key}' in a JSON object of the request body.", code="duplicate_key")
        out[key] = value
    return out


def _nesting_depth(text: str) -> int:
    """The deepest nesting of `{`/`[` outside strings (a linear scan, no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "}]":
            depth -= 1
    return deepest


def _bad_string(s: str) -> str | None:
    if "\x00" in s:
        return "contains a NUL character"
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone UTF-16 surrogate (not valid Unicode text)"
    return None


def _check_strings(value: Any) -> None:
    stack: list[tuple[Any, list[Any]]] = [(value, [])]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            problem = _bad_string(node)
            if problem:
                where = _path(path)
                raise BadBody(f"Invalid value for '{where or 'body'}': the string {problem}.",
                              code="invalid_value", param=where or None)
        elif isinstance(node, dict):
            for key, item in node.items():
                problem = _bad_string(key)
                if problem:
                    raise BadBody(f"Invalid key in '{_path(path) or 'body'}': the key {problem}.",
                                  code="invalid_value", param=_path(path) or None)
                stack.append((item, [*path, key]))
        elif isinstance(node, list):
            stack.extend((item, [*path, i]) for i, item in enumerate(node))


def check_body(raw: bytes, *, max_depth: int) -> None:
    """Raise `BadBody` if `raw` is not a strict, clean JSON document."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadBody(f"Request body is not valid UTF-8 (invalid byte at offset {exc.start}).",
                      code="invalid_encoding") from exc
    depth = _nesting_depth(text)
    if depth > max_depth:
        raise BadBody(f"Request body nests JSON {depth} levels deep; the limit is {max_depth}.",
                      code="invalid_json")
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise BadBody(f"Malformed JSON in request body: {exc.msg} (line {exc.lineno}, column {exc.colno}).",
                      code="invalid_json") from exc
    except RecursionError as exc:
        raise BadBody("Request body nests JSON too deeply.", code="invalid_json") from exc
    except ValueError as exc:  # e.g. an integer literal past Python's 4300-digit conversion limit
        raise BadBody(f"Malformed JSON in request body: {exc}.", code="invalid_json") from exc
    _check_strings(value)


class StrictJsonBody:
    def __init__(self, app: ASGIApp, *, max_depth: int = 256) -> None:
        self.app = app
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # client gone before the body arrived
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        if raw.strip():
            try:
                check_body(raw, max_depth=self.max_depth)
            except BadBody as exc:
                await _reject(send, exc)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _reject(send: Send, exc: BadBody) -> None:
    body = json.dumps(error_payload(exc.message, param=exc.param, code=exc.code)).encode()
    headers: list[Any] = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})
