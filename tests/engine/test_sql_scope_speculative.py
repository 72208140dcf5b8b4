"""Greedy speculative decoding equals greedy plain decoding, token for token, under the
schema-aware SQL grammar with its identifier-scope layer (tiny float32 pair); every token of
the output is one the scoped matcher accepts, and the scope layer is really in the loop."""

from __future__ import annotations

from typing import Any

import pytest

from engine.types import GenerationRequest, SamplingOptions
from grammars.sql.mask.matcher import ScopedSqlMatcher

DDL = ('CREATE TABLE singer (Singer_ID int, Name text, Age int);\n'
       'CREATE TABLE song (Song_ID int, Title text, Singer_ID int, Sales real);')
BODY = {"response_format": {"type": "sql", "sql": {"dialect": "sqlite", "schema": DDL}}}


def _prompt(tokenizer: Any) -> list[int]:
    return list(tokenizer.encode("SELECT T1.Name, T2.Title FROM singer AS T1 JOIN song AS T2 ON "
                                 "T1.Singer_ID = T2.Singer_ID -- again: SELECT T2."))


@pytest.mark.parametrize("drafter,options", [("model", {}), ("model", {"draft_mask": False}), ("ngram", {})])
def test_greedy_speculative_equals_plain_under_the_scoped_sql_grammar(
    drafter: str, options: dict[str, Any], make_decoder: Any, compile_body: Any, tiny_pair: Any,
) -> None:
    grammar = compile_body(BODY)
    assert isinstance(grammar.matcher(), ScopedSqlMatcher)
    prompt = _prompt(tiny_pair[2])
    sampling = SamplingOptions(temperature=0.0, max_tokens=24)
    plain = make_decoder(drafter="none", k=0).generate(GenerationRequest("p", prompt, sampling, grammar=grammar))
    spec = make_decoder(drafter=drafter, k=4, **options).generate(
        GenerationRequest("s", prompt, sampling, grammar=grammar))
    assert spec.output_ids == plain.output_ids
    matcher = grammar.matcher()
    assert matcher.validate(plain.output_ids) == len(plain.output_ids)
