"""The answer policy of a SQL request: what happens when sqlite refuses a grammar-valid answer.

Read from `response_format.sql` or `structured_outputs.sql` (the same object that carries
`dialect` and `schema`):
- `on_invalid`: "report" (default) returns the answer as generated, with its sqlite verdict
  in the choice's `sql` field; "retry" generates again, up to `max_attempts` in all, and
  returns the first answer sqlite accepts (or the last one, marked invalid).
- `max_attempts` (int, 1..8, default 3) and `retry_temperature` (float > 0, default 0.7):
  attempt 1 samples with the request's own parameters; attempts 2.. sample at
  `retry_temperature` when the request's temperature is 0 (greedy would repeat itself),
  else at the request's temperature, each with its own seed (request seed + attempt).
Output law: with "report" the answer is ordinary grammar-masked sampling from the target.
With "retry" it is NOT: the answer is conditioned on sqlite accepting it (for T > 0 and
enough attempts, masked sampling conditioned on validity; at T = 0, the greedy answer when
it runs, else a sample at `retry_temperature`).

`sql_options(sql, *, param) -> SqlOptions` validates the object (unknown keys are a
GrammarError naming the key); `sql_options_from_request(body) -> SqlOptions | None`.
Knows nothing of tokenizers, models or HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grammars.errors import GrammarError

SQL_KEYS = ("dialect", "schema", "on_invalid", "max_attempts", "retry_temperature")
MAX_ATTEMPTS_LIMIT = 8


@dataclass(frozen=True)
class SqlOptions:
    on_invalid: str = "report"
    max_attempts: int = 3
    retry_temperature: float = 0.7

    @property
    def retries(self) -> bool:
        return self.on_invalid == "retry" and self.max_attempts > 1


def sql_options(sql: dict[str, Any], *, param: str) -> SqlOptions:
    for key in sql:
        if key not in SQL_KEYS:
            raise GrammarError(f"unsupported field '{key}' (expected one of {', '.join(SQL_KEYS)})",
                               param=f"{param}.{key}")
    on_invalid = sql.get("on_invalid", "report")
    if on_invalid not in ("report", "retry"):
        raise GrammarError(f"on_invalid must be 'report' or 'retry', got {on_invalid!r}",
                           param=f"{param}.on_invalid")
    attempts = sql.get("max_attempts", 3)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= MAX_ATTEMPTS_LIMIT:
        raise GrammarError(f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_LIMIT}",
                           param=f"{param}.max_attempts")
    temperature = sql.get("retry_temperature", 0.7)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 < temperature <= 2:
        raise GrammarError("retry_temperature must be a number in (0, 2]", param=f"{param}.retry_temperature")
    return SqlOptions(on_invalid=str(on_invalid), max_attempts=attempts, retry_temperature=float(temperature))


def sql_options_from_request(body: dict[str, Any]) -> SqlOptions | None:
    """The SQL answer policy of a request body, or None when it asks for no SQL."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "sql":
        return sql_options(fmt.get("sql") or {}, param="response_format.sql")
    outputs = body.get("structured_outputs")
    if isinstance(outputs, dict) and isinstance(outputs.get("sql"), dict):
        return sql_options(outputs["sql"], param="structured_outputs.sql")
    return None
