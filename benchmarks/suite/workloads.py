"""Benchmark workloads: cases built from the shared public data sets, as OpenAI-shaped requests.

A `Case` is one chat request: `messages`, `tools` (rendered by the chat template), and `body`,
the OpenAI request fields that decide the grammar (`response_format` / `tools` +
`tool_choice`; empty for unconstrained chat), fed to `grammars.spec_from_request` by the
runner exactly as the gateway would. `check` says how validity is judged (benchmarks.suite
.validity). A `Workload` is a named tuple of cases plus the grammar compiler's whitespace
bound.

Workloads (`WORKLOADS`):
- `json`: jsonschemabench schemas (Glaiveai2K and Github_easy, small ones), prompt asking
  for an instance with the schema in the prompt, flexible whitespace (compiler default,
  up to 16 whitespace characters per gap);
- `json-noschema`: the same schemas only in `response_format`; the prompt names the record;
- `json-ws1`: schema in the prompt, whitespace bounded to ONE character per gap (no
  pretty-printed JSON). grammars has no "compact" option: the request hint
  `disable_any_whitespace` is accepted and ignored, and xgrammar refuses max_whitespace 0;
- `tools`: BFCL simple_python questions with their function as an OpenAI tool,
  `tool_choice: "required"`;
- `tools-trace`: multi-turn tool traces (`benchmarks.suite.tool_traces`): the same BFCL
  tool called again with new arguments, each turn one case with the earlier turns' calls in
  its conversation, the turns of a trace in order;
- `sql`: Spider dev questions, schema-aware SQL grammar
  `{"type": "sql", "sql": {"dialect": "sqlite", "schema": DDL}}`, DDL also in the prompt;
- `chat`: the `json` prompts with no constraint at all (the reference; validity then says
  how often unconstrained output happens to be a valid instance).

Selection is deterministic: a fixed stride through each data file, so `n` cases are spread
over the file. Knows nothing about models, engines or timing.
"""

from __future__ import annotations

import json
import pathlib
import re
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import DATA
from benchmarks.suite.bfcl import bfcl_to_openai_tool

WORKLOADS = ("json", "json-noschema", "json-ws1", "tools", "tools-trace", "sql", "text2sql", "text2sql-free", "chat")
DEFAULT_DATA_DIR = DATA
FLEXIBLE_WHITESPACE = 16
TIGHT_WHITESPACE = 1
_JSON_FILES = ("Glaiveai2K.jsonl", "Github_easy.jsonl")
_MAX_SCHEMA_CHARS = 700


@dataclass(frozen=True)
class Case:
    case_id: str
    messages: list[dict[str, Any]]
    body: dict[str, Any]
    check: dict[str, Any]
    tools: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Workload:
    name: str
    cases: tuple[Case, ...]
    max_whitespace: int = FLEXIBLE_WHITESPACE
    description: str = ""
    notes: dict[str, Any] = field(default_factory=dict)


def stride(items: list[Any], n: int) -> list[Any]:
    if n <= 0 or not items:
        return []
    if n >= len(items):
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def _read_jsonl(path: pathlib.Path) -> list[dict[str, Any]]:
    with path.open() as handle:
        return [json.loads(line) for line in handle if line.strip()]


def json_schemas(data_dir: pathlib.Path, n: int) -> list[tuple[str, dict[str, Any]]]:
    """(id, schema) pairs: small object schemas, alternating between the two files."""
    pools = []
    for name in _JSON_FILES:
        rows = _read_jsonl(data_dir / "jsonschemabench" / name)
        pools.append([
            (row["id"], row["schema"]) for row in rows
            if isinstance(row.get("schema"), dict) and row["schema"].get("type", "object") == "object"
            and "properties" in row["schema"] and len(json.dumps(row["schema"])) <= _MAX_SCHEMA_CHARS
        ])
    per_pool = [stride(pool, (n + len(pools) - 1 - i) // len(pools)) for i, pool in enumerate(pools)]
    mixed: list[tuple[str, dict[str, Any]]] = []
    for index in range(max(len(p) for p in per_pool)):
        mixed.extend(pool[index] for pool in per_pool if index < len(pool))
    return mixed[:n]


def record_name(schema_id: str, schema: dict[str, Any]) -> str:
    """A human name for a schema's record: its title, else words from the id."""
    title = schema.get("title")
    if isinstance(title, str) and title.strip():
        return title.strip()
    stem = schema_id.split("---")[-1]
    stem = re.sub(r"_[0-9a-f]{6,}$", "", stem)
    return re.sub(r"[_\-.]+", " ", stem).strip() or "record"


def _json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "instance", "schema": schema}}}


def load_json(data_dir: pathlib.Path, n: int, *, schema_in_prompt: bool, constrained: bool = True) -> list[Case]:
    cases = []
    for schema_id, schema in json_schemas(data_dir, n):
        if schema_in_prompt:
            prompt = (f"Write a realistic example JSON instance of this JSON schema:\n{json.dumps(schema)}\n"
                      "Answer with the JSON only.")
        else:
            prompt = f"Write a realistic example '{record_name(schema_id, schema)}' record as a JSON object."
        cases.append(Case(
            case_id=schema_id,
            messages=[{"role": "user", "content": prompt}],
            body=_json_body(schema) if constrained else {},
            check={"kind": "json", "schema": schema},
        ))
    return cases


def load_tools(data_dir: pathlib.Path, n: int) -> list[Case]:
    rows = _read_jsonl(data_dir / "bfcl" / "BFCL_v4_simple_python.json")
    cases = []
    for row in stride(rows, n):
        tools = [bfcl_to_openai_tool(function) for function in row["function"]]
        messages = [dict(message) for message in row["question"][0]]
        cases.append(Case(
            case_id=row["id"],
            messages=messages,
            body={"tools": tools, "tool_choice": "required", "parallel_tool_calls": False},
            check={"kind": "tools", "tools": tools},
            tools=tools,
        ))
    return cases


def load_sql(data_dir: pathlib.Path, n: int) -> list[Case]:
    root = data_dir / "text2sql" / "spider"
    questions = json.loads((root / "dev.json").read_text())
    cases = []
    for index, row in enumerate(stride(questions, n)):
        ddl = (root / "ddl" / f"{row['db_id']}.sql").read_text()
        prompt = (f"SQLite database schema:\n{ddl}\nWrite one SQLite query that answers: {row['question']}\n"
                  "Answer with the SQL query only.")
        cases.append(Case(
            case_id=f"spider-{row['db_id']}-{index}",
            messages=[{"role": "user", "content": prompt}],
            body={"response_format": {"type": "sql", "sql": {"dialect": "sqlite", "schema": ddl}}},
            check={"kind": "sql", "ddl": ddl},
        ))
    return cases


def load_workload(name: str, n: int, *, data_dir: pathlib.Path | None = None) -> Workload:
    """The first `n` cases of workload `name` (see WORKLOADS)."""
    data = pathlib.Path(data_dir) if data_dir is not None else DEFAULT_DATA_DIR
    if not data.is_dir():
        raise FileNotFoundError(f"benchmark data directory {data} does not exist (pass --data-dir)")
    if name == "json":
        return Workload(name, tuple(load_json(data, n, schema_in_prompt=True)),
                        description="JSON schema in prompt, flexible whitespace")
    if name == "json-noschema":
        return Workload(name, tuple(load_json(data, n, schema_in_prompt=False)),
                        description="JSON schema only in response_format, flexible whitespace")
    if name == "json-ws1":
        return Workload(name, tuple(load_json(data, n, schema_in_prompt=True)), max_whitespace=TIGHT_WHITESPACE,
                        description="JSON schema in prompt, at most 1 whitespace char per gap")
    if name == "tools":
        return Workload(name, tuple(load_tools(data, n)), description="BFCL simple_python, tool_choice=required")
    if name == "tools-trace":
        from benchmarks.suite.tool_traces import TURNS, tool_trace_cases

        return Workload(name, tuple(tool_trace_cases(data, n)),
                        description=f"BFCL simple_python, {TURNS}-turn traces: the same tool, new arguments")
    if name == "sql":
        return Workload(name, tuple(load_sql(data, n)), description="Spider dev, schema-aware SQLite grammar")
    if name in ("text2sql", "text2sql-free"):
        from benchmarks.text2sql.sample import text2sql_cases

        per_db = max(1, -(-n // 8))
        cases = text2sql_cases(data, per_db, 0, constrained=name == "text2sql")[:n]
        return Workload(name, tuple(cases), description="Spider dev sample, " + (
            "schema-aware SQLite grammar" if name == "text2sql" else "no constraint"))
    if name == "chat":
        return Workload(name, tuple(load_json(data, n, schema_in_prompt=True, constrained=False)),
                        description="the json prompts, unconstrained (reference)")
    raise ValueError(f"unknown workload {name!r}; expected one of {', '.join(WORKLOADS)}")
