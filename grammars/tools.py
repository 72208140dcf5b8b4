"""Tool calling: request tools → spec, spec → grammar (an xgrammar structural tag).

Modes (from `tool_choice` / `parallel_tool_calls`):
- "required": one or more calls (exactly one with `parallel_tool_calls: false`), nothing
  else, in the tagged form the Qwen2.5 / Hermes templates teach:

      <tool_call>
      {"name": "get_weather", "arguments": {"city": "Paris"}}
      </tool_call>

  several calls separated by a single "\\n";
- "named": exactly one tagged call, of the named function;
- "auto" (OpenAI's default): free text, in which the grammar switches on where a call opens
  (the tagged form, or a bare JSON object naming a listed tool, fenced or in a list: the forms
  of grammars.tool_calls) and enforces the call's arguments from there; free text that never
  opens a call is unconstrained;
- "none" (or no tools): no spec at all.

The arguments object is constrained by the tool's `parameters` JSON schema (strict tools are
checked by `check_strict_schema`). Bad requests (duplicate names, an unknown named tool, a
schema that cannot be enforced) raise GrammarError naming the field. Reading calls back out
of the text is grammars.tool_calls.

Knows nothing of tokenizers, backends, HTTP or streaming.
"""

from __future__ import annotations

import json
import re
from typing import Any

from grammars.errors import GrammarError
from grammars.json.policy import check_strict_schema
from grammars.spec import GrammarSpec, canonical_json
from grammars.tool_calls import BARE_OPENINGS, CALL_BEGIN, CALL_END

CALL_SEPARATOR = "\n"
_EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


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
    return {"name": name, "parameters": parameters, "strict": strict, "index": index}


def structural_tag(spec: GrammarSpec, *, max_whitespace: int,
                   schemas: list[Any] | None = None,
                   argument_grammars: list[str] | None = None) -> dict[str, Any]:
    """The xgrammar structural tag (a JSON-able dict) for a "tools" spec.

    "required" and "named": tagged calls only, separated by a newline. "auto": free text in
    which a call switches the grammar on at its opening (`<tool_call>`, or a bare opening
    naming a listed tool, see grammars.tool_calls); from there the call's arguments follow
    the tool's schema, and after the call the text is free again (no more text or calls
    with `parallel_tool_calls: false`). `schemas` replaces each tool's parameters schema (in
    order) by the backend's own reading of it; `argument_grammars` (in order) gives each
    tool's arguments as xgrammar EBNF instead (a whitespace layout, grammars.json.layout)."""
    config = spec.source_json
    if schemas is not None:
        config = {**config, "tools": [{**entry, "parameters": schema}
                                      for entry, schema in zip(config["tools"], schemas, strict=True)]}
    if argument_grammars is not None:
        config = {**config, "tools": [{**entry, "arguments_grammar": grammar} for entry, grammar
                                      in zip(config["tools"], argument_grammars, strict=True)]}
    tagged = [_tagged_call(entry, max_whitespace) for entry in config["tools"]]
    if config["mode"] != "auto":
        calls = {"type": "tags_with_separator", "tags": tagged, "separator": CALL_SEPARATOR,
                 "at_least_one": True, "stop_after_first": not config["parallel"]}
        return {"type": "structural_tag", "format": calls}
    bare = [_bare_call(entry, opening, max_whitespace)
            for opening in BARE_OPENINGS for entry in config["tools"]]
    triggers = [CALL_BEGIN] + [tag["begin"] for tag in bare]
    fmt = {"type": "triggered_tags", "triggers": triggers, "tags": tagged + bare,
           "at_least_one": False, "stop_after_first": not config["parallel"]}
    return {"type": "structural_tag", "format": fmt}


def _arguments(entry: dict[str, Any], max_whitespace: int) -> dict[str, Any]:
    if "arguments_grammar" in entry:
        return {"type": "grammar", "grammar": entry["arguments_grammar"]}
    return {"type": "json_schema", "json_schema": entry["parameters"],
            "max_whitespace_cnt": max_whitespace}


def _tagged_call(entry: dict[str, Any], max_whitespace: int) -> dict[str, Any]:
    return {"type": "tag",
            "begin": f'{CALL_BEGIN}\n{{"name": {json.dumps(entry["name"])}, "arguments": ',
            "content": _arguments(entry, max_whitespace),
            "end": f"}}\n{CALL_END}"}


def _bare_call(entry: dict[str, Any], opening: str, max_whitespace: int) -> dict[str, Any]:
    """`{"name": "NAME", "arguments": ARGS}` in any of the bare layouts: the opening and the
    name are the trigger; the rest of the object is enforced from there."""
    ws = f"[ \\t\\n]{{0,{max_whitespace}}}"
    return {"type": "tag",
            "begin": f'{opening}{entry["name"]}"',
            "content": {"type": "sequence", "elements": [
                {"type": "regex", "pattern": f',{ws}"arguments": ?'},
                _arguments(entry, max_whitespace),
                {"type": "regex", "pattern": ws},
            ]},
            "end": "}"}
