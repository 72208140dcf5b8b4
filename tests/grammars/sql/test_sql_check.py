"""sqlite verdicts on SQL answers (grammars.sql.check) and the SQL answer policy options."""

from __future__ import annotations

import pytest

from grammars import GrammarError, spec_from_request
from grammars.sql.check import check_sql, schema_ddl
from grammars.sql.options import SqlOptions, sql_options_from_request

TABLES = {"singer": ["Singer_ID", "Name", "Age"], "concert": ["concert_ID", "Name", "Year"]}


@pytest.mark.parametrize(("query", "status"), [
    ("SELECT Name FROM singer;", "ok"),
    ("select T1.Age from singer as T1 join concert as T2 on T1.Singer_ID = T2.concert_ID", "ok"),
    ("SELECT salary FROM singer", "semantic"),
    ("SELECT T3.Name FROM singer AS T1", "semantic"),           # alias never defined
    ("SELECT Name FROM singer JOIN concert", "semantic"),        # ambiguous column
    ("SELECT abs(Age, 1) FROM singer", "semantic"),              # function arity
    ("SELECT FROM singer", "syntax"),
    ("SELECT Name FROM singer WHERE Name = 'x", "syntax"),
    ("SELECT 1; DROP TABLE singer", "syntax"),                   # one statement only
    ("  ;", "empty"),
])
def test_verdicts(query: str, status: str) -> None:
    verdict = check_sql(query, TABLES)
    assert verdict.status == status, verdict
    assert verdict.valid == (status == "ok")
    assert (verdict.error is None) == (status == "ok")


def test_ddl_text_and_quoting() -> None:
    ddl = schema_ddl({'we"ird': ["a b"]})
    assert check_sql('SELECT "a b" FROM "we""ird"', ddl).valid
    assert check_sql("SELECT Name FROM singer", 'CREATE TABLE singer ("Name" TEXT);').valid


def test_answer_policy_options() -> None:
    schema = {"tables": TABLES}
    assert sql_options_from_request({"response_format": {"type": "sql", "sql": {"schema": schema}}}) == SqlOptions()
    options = sql_options_from_request({"structured_outputs": {"sql": {
        "schema": schema, "on_invalid": "retry", "max_attempts": 5, "retry_temperature": 0.5}}})
    assert options == SqlOptions("retry", 5, 0.5) and options.retries
    assert sql_options_from_request({"response_format": {"type": "json_object"}}) is None
    for bad, param in (({"on_invalid": "fix"}, "response_format.sql.on_invalid"),
                       ({"max_attempts": 0}, "response_format.sql.max_attempts"),
                       ({"retry_temperature": 0}, "response_format.sql.retry_temperature"),
                       ({"shcema": "x"}, "response_format.sql.shcema")):
        with pytest.raises(GrammarError) as info:
            spec_from_request({"response_format": {"type": "sql", "sql": {"schema": schema, **bad}}})
        assert info.value.param == param


def test_structured_outputs_sql_is_the_same_grammar() -> None:
    ddl = 'CREATE TABLE singer ("Name" TEXT, "Age" INT);'
    a = spec_from_request({"response_format": {"type": "sql", "sql": {"dialect": "sqlite", "schema": ddl}}})
    b = spec_from_request({"structured_outputs": {"sql": {"schema": ddl, "on_invalid": "retry"}}})
    assert a == b and a is not None and a.kind == "sql"  # the policy is not part of the grammar
    with pytest.raises(GrammarError) as info:
        spec_from_request({"structured_outputs": {"sql": {"dialect": "postgres", "schema": ddl}}})
    assert info.value.param == "structured_outputs.sql.dialect"
