"""Request-shape limits: refuse a request that is too large to handle before anything is
tokenized or compiled, with a 400 in OpenAI's envelope naming the field and the limit.

Contract: `check_request_shape(body, settings)` takes the request body as a plain dict (the
parsed, validated request dumped back with `exclude_unset`) and checks, in this order:
- `messages`: at most `max_messages`;
- `tools`: at most `max_tools`;
- `stop`: at most `max_stop_sequences` strings, each at most `max_stop_chars` characters;
- every JSON schema (`response_format.json_schema.schema`, `structured_outputs.json`,
  `guided_json`, `tools[i].function.parameters`) and an SQL schema (`response_format.sql.schema`):
  compact-JSON size at most `max_schema_bytes`, nesting of objects/arrays at most
  `max_schema_depth`, every `enum` at most `max_enum_size` values;
- every regex or grammar text (`structured_outputs.regex|grammar`, `guided_regex`,
  `guided_grammar`, `response_format.grammar.definition`): at most `max_grammar_bytes` UTF-8
  bytes; every choice list (`structured_outputs.choice`, `guided_choice`) at most
  `max_enum_size` entries.
The depth walk is iterative (a deep schema cannot exhaust the Python stack). Code
`limit_exceeded`. Knows nothing of grammars, engines or HTTP framing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from gateway.errors import APIError
from gateway.settings import GatewaySettings


def _limit(message: str, param: str) -> APIError:
    return APIError(message, param=param, code="limit_exceeded")


def _get(body: Any, *path: str) -> Any:
    node = body
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _schemas(body: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for param, value in (
        ("response_format.json_schema.schema", _get(body, "response_format", "json_schema", "schema")),
        ("response_format.sql.schema", _get(body, "response_format", "sql", "schema")),
        ("structured_outputs.json", _get(body, "structured_outputs", "json")),
        ("guided_json", body.get("guided_json")),
    ):
        if value is not None:
            yield param, value
    tools = body.get("tools")
    if isinstance(tools, list):
        for i, tool in enumerate(tools):
            params = _get(tool, "function", "parameters")
            if params is not None:
                yield f"tools[{i}].function.parameters", params


def _texts(body: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for param, value in (
        ("structured_outputs.regex", _get(body, "structured_outputs", "regex")),
        ("structured_outputs.grammar", _get(body, "structured_outputs", "grammar")),
        ("guided_regex", body.get("guided_regex")),
        ("guided_grammar", body.get("guided_grammar")),
        ("response_format.grammar.definition", _get(body, "response_format", "grammar", "definition")),
    ):
        if isinstance(value, str):
            yield param, value


def _choices(body: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for param, value in (("structured_outputs.choice", _get(body, "structured_outputs", "choice")),
                         ("guided_choice", body.get("guided_choice"))):
        if isinstance(value, list):
            yield param, value


def schema_depth_and_enums(schema: Any) -> tuple[int, int]:
    """(deepest nesting of dicts/lists, largest `enum` list) of a JSON value, iteratively."""
    deepest, largest_enum = 0, 0
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            deepest = max(deepest, depth)
            enum = node.get("enum")
            if isinstance(enum, list):
                largest_enum = max(largest_enum, len(enum))
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in node if isinstance(v, dict | list))
    return deepest, largest_enum


def _check_schema(param: str, schema: Any, settings: GatewaySettings) -> None:
    if isinstance(schema, str):
        size = len(schema.encode("utf-8", "surrogatepass"))
        if size > settings.max_schema_bytes:
            raise _limit(f"{param} is {size} bytes; the limit is {settings.max_schema_bytes}.", param)
        try:
            schema = json.loads(schema)
        except (ValueError, RecursionError):
            return  # not JSON: the grammar step names it
    deepest, largest_enum = schema_depth_and_enums(schema)
    if deepest > settings.max_schema_depth:
        raise _limit(f"{param} nests {deepest} levels deep; the limit is {settings.max_schema_depth}.", param)
    if largest_enum > settings.max_enum_size:
        raise _limit(f"{param} has an enum of {largest_enum} values; the limit is {settings.max_enum_size}.",
                     param)
    size = len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size > settings.max_schema_bytes:
        raise _limit(f"{param} is {size} bytes as compact JSON; the limit is {settings.max_schema_bytes}.",
                     param)


def check_request_shape(body: dict[str, Any], settings: GatewaySettings) -> None:
    """Raise a 400 `limit_exceeded` naming the first field past its limit."""
    messages = body.get("messages")
    if isinstance(messages, list) and len(messages) > settings.max_messages:
        raise _limit(f"messages has {len(messages)} entries; the limit is {settings.max_messages}.", "messages")
    tools = body.get("tools")
    if isinstance(tools, list) and len(tools) > settings.max_tools:
        raise _limit(f"tools has {len(tools)} entries; the limit is {settings.max_tools}.", "tools")
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    if len(stops) > settings.max_stop_sequences:
        raise _limit(f"stop has {len(stops)} strings; the limit is {settings.max_stop_sequences}.", "stop")
    for i, s in enumerate(stops):
        if isinstance(s, str) and len(s) > settings.max_stop_chars:
            param = "stop" if isinstance(stop, str) else f"stop[{i}]"
            raise _limit(f"{param} is {len(s)} characters; the limit is {settings.max_stop_chars}.", param)
    for param, schema in _schemas(body):
        _check_schema(param, schema, settings)
    for param, text in _texts(body):
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > settings.max_grammar_bytes:
            raise _limit(f"{param} is {size} bytes; the limit is {settings.max_grammar_bytes}.", param)
    for param, choices in _choices(body):
        if len(choices) > settings.max_enum_size:
            raise _limit(f"{param} has {len(choices)} entries; the limit is {settings.max_enum_size}.", param)
