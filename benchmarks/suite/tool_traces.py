"""Multi-turn tool traces: an agent calling the same tool again with new arguments.

Built from BFCL simple_python: a question whose text holds integers, its function as the one
tool, and its ground-truth call (`possible_answer`). Turn j (0-based) of a trace asks the same
question with every integer x written as x + 2j (the ground-truth call's integer arguments
that appear in the question shifted alike); the conversation before it holds the earlier
turns: the user's question, the assistant's tool call, the tool's answer. Each turn is one
case (`tool_choice: "required"`), the turns of a trace in order, so an engine that learns from
its earlier outputs meets the same call shapes and arguments again, as agents do.

Knows nothing about models, engines or timing.
"""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any

from benchmarks.suite.bfcl import bfcl_to_openai_tool, openai_tool_name

TURNS = 4
_INTEGER = re.compile(r"(?<![\w.$])\d+(?![\w.,]\d)")


def _shift_text(text: str, turn: int) -> str:
    return _INTEGER.sub(lambda m: str(int(m.group()) + 2 * turn), text)


def _call(ground_truth: dict[str, Any], question_ints: set[int], turn: int) -> tuple[str, dict[str, Any]]:
    """The ground truth's function name and its first allowed value per argument (optional
    arguments left out), integers from the question shifted to `turn`."""
    [(name, options)] = ground_truth.items()
    arguments: dict[str, Any] = {}
    for key, allowed in options.items():
        value = allowed[0] if allowed else ""
        if value == "":
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value in question_ints:
            value += 2 * turn
        arguments[key] = value
    return openai_tool_name(name), arguments


def tool_trace_cases(data_dir: pathlib.Path, n: int, *, turns: int = TURNS) -> list[Any]:
    """`n` cases: ceil(n / turns) traces of `turns` turns each (the last one cut), spread over
    the questions that hold integers."""
    from benchmarks.suite.workloads import Case, stride

    root = data_dir / "bfcl"
    rows = [json.loads(line) for line in (root / "BFCL_v4_simple_python.json").read_text().splitlines() if line]
    answers = {row["id"]: row["ground_truth"][0] for row in (
        json.loads(line) for line in (root / "possible_answer" / "BFCL_v4_simple_python.json").read_text().splitlines()
        if line)}
    usable = [row for row in rows if _INTEGER.search(row["question"][0][-1]["content"]) and row["id"] in answers]
    cases: list[Any] = []
    for row in stride(usable, -(-n // turns)):
        tools = [bfcl_to_openai_tool(function) for function in row["function"]]
        question = row["question"][0][-1]["content"]
        ints = {int(m.group()) for m in _INTEGER.finditer(question)}
        messages: list[dict[str, Any]] = []
        for turn in range(turns):
            messages = [*messages, {"role": "user", "content": _shift_text(question, turn)}]
            cases.append(Case(
                case_id=f"{row['id']}-turn{turn}",
                messages=messages,
                body={"tools": tools, "tool_choice": "required", "parallel_tool_calls": False},
                check={"kind": "tools", "tools": tools},
                tools=tools,
            ))
            name, arguments = _call(answers[row["id"]], ints, turn)
            messages = [*messages,
                        {"role": "assistant", "content": "", "tool_calls": [{
                            "type": "function", "function": {"name": name, "arguments": arguments}}]},
                        {"role": "tool", "content": json.dumps({"status": "ok"})}]
    return cases[:n]
