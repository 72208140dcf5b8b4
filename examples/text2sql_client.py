"""Text2SQL over a running specgate server with the official `openai` SDK.

    bash scripts/serve.sh &                       # the gateway on http://127.0.0.1:8000
    python examples/text2sql_client.py --ddl ../shared/data/text2sql/spider/ddl/concert_singer.sql \\
        "How many singers are there?" "What is the average age of French singers?"

For every question it asks for `response_format: {"type": "sql", ...}` with the DDL as the
schema (so the answer is one SQLite SELECT over that schema's tables and columns), and
prints the SQL, the server's sqlite verdict (the choice's `sql` field: valid / status /
error / attempts) and the rows the query returns on a database filled with seeded random
rows (benchmarks.text2sql: types and foreign keys kept, the query's literals included).
`--retry` asks for the opt-in retry policy (`on_invalid: "retry"`): the server generates
again until sqlite accepts the answer (this changes the output law; see docs/sql.md).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # for benchmarks.text2sql

from openai import OpenAI  # noqa: E402

from benchmarks.text2sql.suite import TestSuite  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("questions", nargs="+")
    parser.add_argument("--ddl", type=pathlib.Path, required=True, help="a file of CREATE TABLE statements")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key", default="unused")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--max-tokens", type=int, default=120)
    parser.add_argument("--retry", action="store_true", help="on_invalid=retry (up to 3 attempts)")
    args = parser.parse_args()
    ddl = args.ddl.read_text()
    client = OpenAI(base_url=args.base_url, api_key=args.api_key)
    sql_format: dict[str, object] = {"dialect": "sqlite", "schema": ddl}
    if args.retry:
        sql_format.update(on_invalid="retry", max_attempts=3)
    for question in args.questions:
        response = client.chat.completions.create(
            model=args.model,
            messages=[{"role": "user", "content": f"SQLite database schema:\n{ddl}\n"
                       f"Write one SQLite query that answers: {question}\nAnswer with the SQL query only."}],
            temperature=0,
            max_tokens=args.max_tokens,
            extra_body={"response_format": {"type": "sql", "sql": sql_format}},
        )
        choice = response.choices[0]
        sql = choice.message.content or ""
        verdict = (choice.model_extra or {}).get("sql", {})
        print(f"Q: {question}\nSQL: {sql}\nvalid: {verdict.get('valid')} ({verdict.get('status')}"
              f"{', ' + verdict['error'] if verdict.get('error') else ''}; attempts {verdict.get('attempts')})")
        if verdict.get("valid"):
            suite = TestSuite.build(ddl, [sql], databases=1, seed=0)
            outcome = suite.run(sql)[0]
            print(f"rows on a filled database: {outcome.rows if outcome.error is None else outcome.error}")
            suite.close()
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
