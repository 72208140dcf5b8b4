"""OpenAI error envelope: `{"error": {"message", "type", "param", "code"}}` for every failure.

`APIError` is raised anywhere in the gateway; `install_error_handlers` maps it, pydantic /
FastAPI validation errors (400 with `param` = the field path, never FastAPI's 422), malformed
JSON (400), HTTP errors and unexpected exceptions (500) onto the envelope. `error_payload`
builds the same dict for errors that happen inside an already-started SSE stream.
This module knows nothing about engines or grammars.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger("specgate.gateway")


class APIError(Exception):
    """An error answered to the client in OpenAI's envelope."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def payload(self) -> dict[str, Any]:
        return error_payload(self.message, type=self.type, param=self.param, code=self.code)


def error_payload(
    message: str, *, type: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def field_path(loc: Sequence[int | str]) -> str:
    """`("body", "messages", 0, "content")` -> `"messages[0].content"`."""
    parts = list(loc)
    if parts and parts[0] == "body":
        parts = parts[1:]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _validation_error(exc: RequestValidationError) -> APIError:
    errors = exc.errors()
    if not errors:
        return APIError("Invalid request body.")
    first = errors[0]
    kind = first.get("type", "")
    loc = tuple(first.get("loc", ()))
    if kind == "json_invalid":
        return APIError(
            f"Malformed JSON in request body: {first.get('ctx', {}).get('error', first.get('msg'))}.",
            code="invalid_json",
        )
    path = field_path(loc)
    if kind == "extra_forbidden":
        return APIError(
            f"Unrecognized request argument supplied: {path}.", param=path, code="unknown_parameter"
        )
    if kind == "missing" and not path:
        return APIError("Request body is missing or is not a JSON object.", code="invalid_json")
    if kind in ("model_attributes_type", "dict_type") and not path:
        return APIError("Request body must be a JSON object.", code="invalid_json")
    msg = first.get("msg", "invalid value")
    return APIError(
        f"Invalid value for '{path}': {msg}." if path else f"Invalid request: {msg}.",
        param=path or None,
        code="invalid_value",
    )


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.payload(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        err = _validation_error(exc)
        return JSONResponse(err.payload(), status_code=err.status_code)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(
            error_payload(str(exc.detail), type=kind),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error")
        return JSONResponse(
            error_payload(f"Internal server error: {type(exc).__name__}", type="server_error"),
            status_code=500,
        )
