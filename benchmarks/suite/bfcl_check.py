"""BFCL's AST check: is a list of tool calls a right answer to one BFCL question?

The rules are those of the Berkeley Function Calling Leaderboard's AST checker for Python
categories, re-implemented here:

- a call's function name must be the expected one, spelt as the OpenAI tool name
  (`benchmarks.suite.bfcl.openai_tool_name`: "math.factorial" is called "math_factorial");
- every parameter the function spec marks `required` must be present;
- every argument given must be a parameter of the function *and* listed in the possible
  answer (so no extra arguments, even valid-looking ones);
- a value must have the parameter's BFCL type (`float` also takes an integer, `tuple` is a
  list, a `bool` is never an `integer`); a value of the possible answer's own type is
  accepted as a "variable" (BFCL's rule for answers written as names);
- the value must be one of the allowed values: strings compared after BFCL's
  standardisation (case, spaces and `,./-_*^` ignored, `'` read as `"`), lists element by
  element with the same standardisation, dicts key by key (a key may be missing only where
  its allowed values contain `""`), lists of dicts dict by dict in order;
- a parameter listed in the possible answer may be omitted only where its allowed values
  contain `""`;
- categories: "simple" and "multiple": exactly one call, checked against the one expected
  call; "parallel" (and "parallel_multiple"): as many calls as expected, each expected
  call matched by a distinct call, in any order; "irrelevance": right iff there is no call.

`check_answer(category, functions, calls, possible)` returns a `Verdict(ok, reason)`;
`functions` are the question's BFCL function specs (its dialect's types), `calls` the
model's calls as `(name, parsed arguments)` pairs
(arguments that are not an object make the call wrong), `possible` BFCL's ground truth list.
Knows nothing of models, HTTP or the gateway.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from benchmarks.suite.bfcl import openai_tool_name

PY_TYPES: dict[str, type] = {
    "string": str, "integer": int, "float": float, "boolean": bool, "array": list,
    "tuple": list, "dict": dict, "any": str,
}
_STANDARDISE = re.compile(r"[ ,./\-_*^]")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""


Call = tuple[str, Any]  # (tool name, parsed arguments: anything but an object is wrong)


def category_kind(category: str) -> str:
    """The checking rule of a BFCL category name: irrelevance, parallel, multiple or simple."""
    for kind in ("irrelevance", "parallel", "multiple"):
        if kind in category:
            return kind
    return "simple"


def check_answer(category: str, functions: list[dict[str, Any]], calls: list[Call],
                 possible: list[dict[str, Any]] | None) -> Verdict:
    kind = category_kind(category)
    if kind == "irrelevance":
        return Verdict(not calls, "" if not calls else f"called {calls[0][0]} where no call fits")
    if possible is None:
        raise ValueError(f"category {category!r} needs a possible answer")
    if kind == "parallel":
        return _check_unordered(functions, calls, possible)
    if len(calls) != 1 or len(possible) != 1:
        return Verdict(False, f"wrong number of calls: {len(calls)} (expected 1)")
    return check_call(functions, calls[0], possible[0])


def _check_unordered(functions: list[dict[str, Any]], calls: list[Call],
                     possible: list[dict[str, Any]]) -> Verdict:
    if len(calls) != len(possible):
        return Verdict(False, f"wrong number of calls: {len(calls)} (expected {len(possible)})")
    used: set[int] = set()
    for expected in possible:
        last = Verdict(False, "no call left")
        for index, call in enumerate(calls):
            if index in used:
                continue
            last = check_call(functions, call, expected)
            if last.ok:
                used.add(index)
                break
        if not last.ok:
            return Verdict(False, f"no call matches expected {next(iter(expected))}: {last.reason}")
    return Verdict(True)


def _spec_for(functions: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for function in functions:
        if function.get("name") == name:
            return function
    raise ValueError(f"the possible answer names {name!r}, which the question does not offer")


def check_call(functions: list[dict[str, Any]], call: Call, expected: dict[str, Any]) -> Verdict:
    """One call against one expected call `{bfcl_name: {param: [allowed values]}}`."""
    (bfcl_name, allowed), = expected.items()
    name, arguments = call
    if name != openai_tool_name(bfcl_name):
        return Verdict(False, f"function {name!r}, expected {openai_tool_name(bfcl_name)!r}")
    if not isinstance(arguments, dict):
        return Verdict(False, "arguments are not an object")
    spec = _spec_for(functions, bfcl_name).get("parameters") or {}
    properties: dict[str, Any] = spec.get("properties") or {}
    for param in spec.get("required") or []:
        if param not in arguments:
            return Verdict(False, f"missing required parameter {param!r}")
    for param, value in arguments.items():
        if param not in properties or param not in allowed:
            return Verdict(False, f"unexpected parameter {param!r}")
        verdict = _check_value(param, value, properties[param], allowed[param])
        if not verdict.ok:
            return verdict
    for param, values in allowed.items():
        if param not in arguments and "" not in values:
            return Verdict(False, f"parameter {param!r} omitted but not optional")
    return Verdict(True)


def standardise(text: str) -> str:
    """BFCL's string standardisation: drop spaces and `,./-_*^`, lower-case, `'` → `"`."""
    return _STANDARDISE.sub("", text).lower().replace("'", '"')


def _first_type(values: list[Any]) -> type | None:
    for value in values:
        if value != "":
            return type(value)
    return None


def _check_value(param: str, value: Any, schema: dict[str, Any], allowed: list[Any]) -> Verdict:
    bfcl_type = schema.get("type")
    expected = PY_TYPES.get(bfcl_type) if isinstance(bfcl_type, str) else None
    if expected is None:  # a type outside BFCL's Python dialect: compare values only
        return _in_allowed(param, value, allowed)
    if bfcl_type == "float" and type(value) is int:
        value = float(value)
    answer_type = _first_type(allowed)
    if type(value) is not expected:
        if answer_type is not None and type(value) is answer_type:
            return _in_allowed(param, value, allowed)  # BFCL's "variable": compare as given
        return Verdict(False, f"parameter {param!r}: {type(value).__name__}, expected {bfcl_type}")
    item_type = (schema.get("items") or {}).get("type") if bfcl_type in ("array", "tuple") else None
    if isinstance(value, list) and isinstance(item_type, str) and item_type in PY_TYPES:
        inner = PY_TYPES[item_type]
        answer_items = {type(item) for option in allowed if isinstance(option, list) for item in option}
        for item in value:
            if type(item) is not inner and type(item) not in answer_items:
                return Verdict(False, f"parameter {param!r}: item {item!r} is not {item_type}")
    if answer_type is not None and answer_type is not expected:
        return _in_allowed(param, value, allowed)  # the answer is written in another type
    if isinstance(value, dict):
        return _check_dict(param, value, allowed)
    if isinstance(value, list) and item_type == "dict":
        return _check_dict_list(param, value, allowed)
    return _in_allowed(param, value, allowed)


def _norm(value: Any) -> Any:
    if isinstance(value, str):
        return standardise(value)
    if isinstance(value, list):
        return [standardise(v) if isinstance(v, str) else v for v in value]
    return value


def _in_allowed(param: str, value: Any, allowed: list[Any]) -> Verdict:
    if isinstance(value, bool):
        ok = any(type(a) is bool and a == value for a in allowed)
    else:
        ok = any(not isinstance(a, bool) and _norm(a) == _norm(value) for a in allowed if a != "")
    return Verdict(ok, "" if ok else f"parameter {param!r}: {value!r} not among {allowed!r}")


def _check_dict(param: str, value: dict[str, Any], allowed: list[Any]) -> Verdict:
    reason = f"parameter {param!r}: {value!r} not among {allowed!r}"
    for option in allowed:
        if not isinstance(option, dict):
            continue
        if all(key in option and _in_allowed(f"{param}.{key}", item, option[key]).ok
               for key, item in value.items()) and all(
                key in value or "" in values for key, values in option.items()):
            return Verdict(True)
    return Verdict(False, reason)


def _check_dict_list(param: str, value: list[Any], allowed: list[Any]) -> Verdict:
    for option in allowed:
        if isinstance(option, list) and len(option) == len(value) and all(
                isinstance(item, dict) and _check_dict(param, item, [want]).ok
                for item, want in zip(value, option, strict=True)):
            return Verdict(True)
    return Verdict(False, f"parameter {param!r}: {value!r} not among {allowed!r}")
