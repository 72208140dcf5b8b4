"""Tool calling: request tools → spec, spec → grammar (structural tag), model text → calls.

Syntax (Qwen2.5 / Hermes chat templates), one call:

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

several calls are separated by a single "\\n". The arguments object is constrained by the
tool's `parameters` JSON schema (strict tools are checked by `check_strict_schema`).

Modes (from `tool_choice` / `parallel_tool_calls`):
- "required": one or more calls (exactly one with `parallel_tool_calls: false`), nothing else;
- "named": exactly one call, of the named function;
- "auto": either free text that never contains "<tool_call>", or tool calls as in
  "required" (with the same `parallel_tool_calls` rule);
- "none" (or no tools): no spec at all.

`parse_tool_calls(text)` inverts the syntax for the gateway: `(content, calls)` where content
is the text outside the calls (None when empty) and each call is ParsedToolCall(name,
arguments) with `arguments` a JSON string. A `<tool_call>` block that is not valid JSON of
that shape (possible only for unconstrained output) is kept as content, never dropped.

Knows nothing of tokenizers, backends, HTTP or streaming.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from grammars.errors import GrammarError
from grammars.json_schema import check_strict_schema
from grammars.spec import GrammarSpec, canonical_json

CALL_BEGIN = "<tool_call>"
CALL_END = "</tool_call>"
CALL_SEPARATOR = "\n"
_EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class ParsedToolCall:
    name: str
    arguments: str  # a JSON object, serialised


def tools_spec(
    tools: Any, tool_choice: Any, parallel_tool_calls: Any
) -> GrammarSpec | None:
    """The spec for `tools` + `tool_choice` + `parallel_tool_calls`, or None (no constraint)."""
    if tools is None or tools == []:
        if tool_choice not in (None, "none", "auto"):
            raise GrammarError("tool_choice requires a non-empty 'tools' list", param="tool_choice")
        return None
    if not isinstance(tools, list):
        raise GrammarError("'tools' must be a list of function tools", param="tools")
    entries = [_tool_entry(tool, index) for index, tool in enumerate(tools)]
    names = [entry["name"] for entry in entries]
    if len(set(names)) != len(names):
        raise GrammarError("duplicate function names in 'tools'", param="tools")
    if parallel_tool_calls is None:
        parallel = True
    elif isinstance(parallel_tool_calls, bool):
        parallel = parallel_tool_calls
    else:
        raise GrammarError("'parallel_tool_calls' must be a boolean", param="parallel_tool_calls")

    choice = "auto" if tool_choice is None else tool_choice
    if choice == "none":
        return None
    if choice in ("auto", "required"):
        mode = choice
    elif isinstance(choice, dict):
        function = choice.get("function") if choice.get("type") == "function" else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            raise GrammarError(
                "tool_choice must be 'none', 'auto', 'required' or "
                '{"type": "function", "function": {"name": ...}}',
                param="tool_choice",
            )
        if name not in names:
            raise GrammarError(f"tool_choice names unknown function '{name}'", param="tool_choice")
        entries = [entry for entry in entries if entry["name"] == name]
        mode, parallel = "named", False
    else:
        raise GrammarError(f"unsupported tool_choice {choice!r}", param="tool_choice")
    source = canonical_json({"mode": mode, "parallel": parallel, "tools": entries})
    return GrammarSpec("tools", source)


def _tool_entry(tool: Any, index: int) -> dict[str, Any]:
    param = f"tools[{index}]"
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        raise GrammarError("only tools of type 'function' are supported", param=f"{param}.type")
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise GrammarError("a function tool needs 'function.name'", param=f"{param}.function")
    name: str = function["name"]
    if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", name):
        raise GrammarError(
            f"invalid function name {name!r} (1-64 of a-z, A-Z, 0-9, _, ., -)",
            param=f"{param}.function.name",
        )
    parameters = function.get("parameters", _EMPTY_PARAMETERS)
    if parameters is None or parameters == {}:
        parameters = _EMPTY_PARAMETERS
    if not isinstance(parameters, dict):
        raise GrammarError("'parameters' must be a JSON schema object",
                           param=f"{param}.function.parameters")
    strict = bool(function.get("strict", False))
    if strict:
        check_strict_schema(parameters, param=f"{param}.function.parameters")
    return {"name": name, "parameters": parameters, "strict": strict}


def structural_tag(spec: GrammarSpec, *, max_whitespace: int) -> dict[str, Any]:
    """The xgrammar structural tag (a JSON-able dict) for a "tools" spec."""
    config = spec.source_json
    tags = [
        {
            "type": "tag",
            "begin": f'{CALL_BEGIN}\n{{"name": {json.dumps(entry["name"])}, "arguments": ',
            "content": {
                "type": "json_schema",
                "json_schema": entry["parameters"],
                "max_whitespace_cnt": max_whitespace,
            },
            "end": f"}}\n{CALL_END}",
        }
        for entry in config["tools"]
    ]
    calls = {
        "type": "tags_with_separator",
        "tags": tags,
        "separator": CALL_SEPARATOR,
        "at_least_one": True,
        "stop_after_first": not config["parallel"],
    }
    if config["mode"] == "auto":
        free_text = {"type": "any_text", "excludes": [CALL_BEGIN]}
        fmt: dict[str, Any] = {"type": "or", "elements": [calls, free_text]}
    else:
        fmt = calls
    return {"type": "structural_tag", "format": fmt}


_CALL_RE = re.compile(re.escape(CALL_BEGIN) + r"\s*(.*?)\s*" + re.escape(CALL_END), re.DOTALL)


def parse_tool_calls(text: str) -> tuple[str | None, list[ParsedToolCall]]:
    """Split model output into (content or None, tool calls) — see the module docstring."""
    calls: list[ParsedToolCall] = []
    content_parts: list[str] = []
    cursor = 0
    for match in _CALL_RE.finditer(text):
        call = _parse_call_body(match.group(1))
        if call is None:
            continue  # stays in the content
        content_parts.append(text[cursor : match.start()])
        cursor = match.end()
        calls.append(call)
    content_parts.append(text[cursor:])
    content = "".join(content_parts) if calls else text
    if calls:
        content = content.strip()
    return (content or None), calls


def _parse_call_body(body: str) -> ParsedToolCall | None:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):  # some models emit the arguments pre-serialised
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ParsedToolCall(obj["name"], json.dumps(arguments, ensure_ascii=False))
