"""BFCL questions from ../shared/data/bfcl: a seeded sample per category, as OpenAI requests.

`load_questions(category, data_dir=, per_category=, seed=, max_prompt_chars=)` reads
`BFCL_v4_<category>.json` (JSONL despite the name) and, except for irrelevance categories,
`possible_answer/BFCL_v4_<category>.json`; keeps single-turn questions whose messages plus
tool definitions (as JSON) fit `max_prompt_chars` (a cheap bound on the prompt length; how
many were left out is returned); and draws `per_category` of them with `random.Random(seed)`
(0 = all), in file order. Each `Question` carries the BFCL function specs (for the checker:
BFCL's own types) and the OpenAI tools made from them (`benchmarks.suite.bfcl`).

Knows nothing of models, servers or checking.
"""

from __future__ import annotations

import json
import pathlib
import random
from dataclasses import dataclass
from typing import Any

from benchmarks.suite.bfcl import bfcl_to_openai_tool

CATEGORIES = ("simple_python", "live_multiple", "parallel_multiple", "irrelevance_part1")


@dataclass(frozen=True)
class Question:
    id: str
    category: str
    messages: list[dict[str, Any]]
    functions: list[dict[str, Any]]  # BFCL specs
    tools: list[dict[str, Any]]  # OpenAI tools
    possible: list[dict[str, Any]] | None  # BFCL ground truth; None where the right answer is no call


def _jsonl(path: pathlib.Path) -> list[dict[str, Any]]:
    with path.open() as lines:
        return [json.loads(line) for line in lines if line.strip()]


def load_questions(category: str, *, data_dir: pathlib.Path, per_category: int, seed: int,
                   max_prompt_chars: int) -> tuple[list[Question], int]:
    """(the sample, how many questions were left out as longer than `max_prompt_chars`)."""
    folder = data_dir / "bfcl"
    rows = _jsonl(folder / f"BFCL_v4_{category}.json")
    answers: dict[str, Any] = {}
    if "irrelevance" not in category:
        answers = {row["id"]: row["ground_truth"] for row in _jsonl(folder / "possible_answer" / f"BFCL_v4_{category}.json")}
    fitting: list[Question] = []
    too_long = 0
    for row in rows:
        if len(row["question"]) != 1:
            continue
        messages = row["question"][0]
        tools = [bfcl_to_openai_tool(function) for function in row["function"]]
        if len(json.dumps(messages)) + len(json.dumps(tools)) > max_prompt_chars:
            too_long += 1
            continue
        fitting.append(Question(row["id"], category, messages, row["function"], tools, answers.get(row["id"])))
    if per_category and per_category < len(fitting):
        chosen = set(random.Random(seed).sample(range(len(fitting)), per_category))
        fitting = [q for i, q in enumerate(fitting) if i in chosen]
    return fitting, too_long
