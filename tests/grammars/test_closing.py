"""grammars.closing: from states in the middle of real queries (Spider dev gold, cut at
seeded token positions), the closing found ends the grammar within its budget, on a query
sqlite compiles against the schema, and leaves the matcher as it was; a JSON value closes
with the generic moves; a budget too small finds none."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import torch

from grammars import spec_from_request
from grammars.closing import closing_tokens
from grammars.sql.check import check_sql
from grammars.sql.grammar import parse_sql_schema
from tests.conftest import DATA
from tokenmask import unpack_bitmask

SPIDER = DATA / "text2sql" / "spider"


def _sql_grammar(compiler: Any, db: str) -> Any:
    ddl = (SPIDER / "ddl" / f"{db}.sql").read_text()
    return compiler.compile(spec_from_request({"response_format": {"type": "sql", "sql": {"schema": ddl}}}))


def _mask(matcher: Any, compiler: Any) -> torch.Tensor:
    bitmask = compiler.allocate_bitmask(1)
    matcher.fill_mask(bitmask, 0)
    return unpack_bitmask(bitmask, compiler.vocab_size)[0]


def _cuts() -> list[tuple[str, str, int]]:
    rng = random.Random(7)
    gold = json.loads((SPIDER / "dev.json").read_text())
    picked = rng.sample(gold, 10)
    return [(e["db_id"], e["query"], rng.randrange(1, 40)) for e in picked]


@pytest.mark.parametrize("db,query,cut", _cuts())
def test_a_sql_prefix_closes_on_a_query_sqlite_compiles(xgr_compiler: Any, qwen_tokenizer: Any, db: str,
                                                         query: str, cut: int) -> None:
    grammar = _sql_grammar(xgr_compiler, db)
    matcher = grammar.matcher()
    ids = qwen_tokenizer.encode(query)[:cut]
    assert matcher.validate(ids) == len(ids)
    for token in ids:
        matcher.accept_token(token)
    before = (matcher.num_accepted, _mask(matcher, xgr_compiler))
    closing = closing_tokens(matcher, budget=48)
    assert matcher.num_accepted == before[0] and torch.equal(_mask(matcher, xgr_compiler), before[1])
    assert closing is not None, qwen_tokenizer.decode(ids)
    assert len(closing) <= 48 and closing[-1] in matcher.stop_token_ids
    for token in closing:
        assert matcher.accept_token(token)
    assert matcher.is_terminated()
    text = qwen_tokenizer.decode(ids + closing[:-1])
    assert check_sql(text, parse_sql_schema((SPIDER / "ddl" / f"{db}.sql").read_text())).valid, text


def test_a_complete_query_closes_with_its_stop_token_and_a_small_budget_finds_none(
        xgr_compiler: Any, qwen_tokenizer: Any) -> None:
    matcher = _sql_grammar(xgr_compiler, "concert_singer").matcher()
    assert matcher.accept_text("SELECT name FROM singer")
    assert closing_tokens(matcher, budget=1) == [matcher.stop_token_ids[0]]
    assert matcher.accept_text(" WHERE age > (SELECT avg(age) FROM")
    assert closing_tokens(matcher, budget=2) is None  # a table, `)` and the stop token at least
    closing = closing_tokens(matcher, budget=8)
    assert closing is not None and len(closing) <= 8


def test_a_json_value_closes_with_the_generic_moves(xgr_compiler: Any, qwen_tokenizer: Any) -> None:
    matcher = xgr_compiler.compile(spec_from_request({"response_format": {"type": "json_object"}})).matcher()
    prefix = '{"a": [1, {"b": "x'
    assert matcher.accept_text(prefix)
    closing = closing_tokens(matcher, budget=12)
    assert closing is not None
    text = prefix + qwen_tokenizer.decode(closing[:-1])
    assert json.loads(text) == {"a": [1, {"b": "x"}]}


def test_a_schema_object_closes_through_the_grammars_forced_text(xgr_compiler: Any, qwen_tokenizer: Any) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
              "required": ["a", "b"], "additionalProperties": False}
    matcher = xgr_compiler.compile(spec_from_request(
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})).matcher()
    prefix = '{"a": "hel'
    assert matcher.accept_text(prefix)
    closing = closing_tokens(matcher, budget=16)
    assert closing is not None
    value = json.loads(prefix + qwen_tokenizer.decode(closing[:-1]))
    assert value["a"] == "hel" and isinstance(value["b"], int)


def test_a_required_array_closes_empty_and_an_open_array_closes_shortest(xgr_compiler: Any,
                                                                        qwen_tokenizer: Any) -> None:
    # a required array value closes as `[]` (not through a run of whitespace the budget cannot
    # hold), and an open array closes at once rather than through a new string element
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "hobbies": {"type": "array", "items": {"type": "string"}}},
              "required": ["name", "hobbies"]}
    grammar = xgr_compiler.compile(spec_from_request(
        {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}}))
    for prefix, expected in (('{ "name": "Alice"', {"name": "Alice", "hobbies": []}),
                             ('{ "name": "Alice", "hobbies": [', {"name": "Alice", "hobbies": []})):
        matcher = grammar.matcher()
        assert matcher.accept_text(prefix)
        closing = closing_tokens(matcher, budget=12)
        assert closing is not None, prefix
        assert json.loads(prefix + qwen_tokenizer.decode(closing[:-1])) == expected
        assert len(closing) <= 8
