"""The SQL grammar with lookaheads and flat rules (grammars.sql.grammar) against the grammar before them.

The references: for the generic grammar, `data/sql_reference_generic.ebnf`, the EBNF text the
generator wrote before the restructuring (flat rules and lookaheads); for the schema grammars
(car_1 and dog_kennels from Spider), whose language has grown since (more functions, backtick
quoting), the current EBNF with its lookaheads removed (`_without_lookaheads`). A lookahead
never changes what xgrammar's parser accepts, only how its masks are computed, so the check
is on masks: along Spider gold queries, mutated queries and seeded random walks off them, the
two grammars must give the same mask at every token position, accept the same tokens and
agree on completion. A wrong (too narrow) lookahead shows up as a mask that refuses a token
the reference allows.
"""

from __future__ import annotations

import json
import pathlib
import random

import numpy as np
import pytest
import torch

from grammars.sql.grammar import _AFTER_ALIAS, _AFTER_LITERAL, parse_sql_schema, sql_ebnf

REFERENCE = pathlib.Path(__file__).parents[1] / "data"
VOCAB = 151_936
_INSERTS = [" ", ".", ",", "'", '"', "(", ")", "é", "1", "a", "_", "=", "\n", ";", "`", "[", "*"]


def _without_lookaheads(ebnf: str) -> str:
    """The same grammar with every lookahead the generator writes removed."""
    out = ebnf.replace(_AFTER_LITERAL, "").replace(_AFTER_ALIAS, "").replace('(= ".")', "")
    assert "(=" not in out, "a lookahead the generator writes is not removed here"
    return out


@pytest.fixture(scope="module")
def xgr_parts(qwen_tokenizer):  # type: ignore[no-untyped-def]
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(qwen_tokenizer, vocab_size=VOCAB)
    return xgr, xgr.GrammarCompiler(info, cache_enabled=False), info


def _mutations(query: str, rng: random.Random) -> list[str]:
    out = []
    for _ in range(3):
        at = rng.randrange(len(query) + 1)
        out.append(query[:at] + rng.choice(_INSERTS) + query[at:])
    at = rng.randrange(len(query))
    out.append(query[:at] + query[at + 1:])
    words = [w for w in query.replace(",", " ").split() if w.isidentifier()]
    if words:
        out.append(query.replace(rng.choice(words), "zz_not_a_name", 1))
    return out


def _allowed(row: torch.Tensor, stop: set[int]) -> list[int]:
    bits = np.unpackbits(row.numpy().view(np.uint8), bitorder="little")[:VOCAB]
    return [int(i) for i in np.flatnonzero(bits) if int(i) not in stop]


def _compare(xgr, compiler, info, reference: str, current: str, texts: list[str],  # type: ignore[no-untyped-def]
             tokenizer, rng: random.Random) -> int:
    ref = xgr.GrammarMatcher(compiler.compile_grammar(reference), max_rollback_tokens=-1)
    cur = xgr.GrammarMatcher(compiler.compile_grammar(current), max_rollback_tokens=-1)
    stop = set(info.stop_token_ids)
    bitmask = torch.zeros((2, (VOCAB + 31) // 32), dtype=torch.int32)
    compared = 0
    for text in texts:
        tokens = tokenizer.encode(text, add_special_tokens=False)
        accepted = 0
        for index, token in enumerate(tokens):
            ref.fill_next_token_bitmask(bitmask, 0)
            cur.fill_next_token_bitmask(bitmask, 1)
            compared += 1
            assert torch.equal(bitmask[0], bitmask[1]), (text, tokenizer.decode(tokens[:index]))
            if index % 4 == 0:  # a seeded random walk off the path, then back
                steps = 0
                for _ in range(4):
                    choices = _allowed(bitmask[0], stop)
                    if not choices:
                        break
                    step = rng.choice(choices)
                    assert ref.accept_token(step) and cur.accept_token(step)
                    steps += 1
                    ref.fill_next_token_bitmask(bitmask, 0)
                    cur.fill_next_token_bitmask(bitmask, 1)
                    compared += 1
                    assert torch.equal(bitmask[0], bitmask[1]), (text, index, steps)
                ref.rollback(steps)
                cur.rollback(steps)
            ok = ref.accept_token(token)
            assert cur.accept_token(token) == ok, (text, index)
            if not ok:
                break
            accepted += 1
        assert ref.is_completed() == cur.is_completed(), text
        ref.rollback(accepted)
        cur.rollback(accepted)
    return compared


@pytest.mark.parametrize("db", ["car_1", "dog_kennels"])
def test_schema_grammar_masks_equal_the_reference(xgr_parts, qwen_tokenizer, data_dir, db) -> None:  # type: ignore[no-untyped-def]
    xgr, compiler, info = xgr_parts
    spider = data_dir / "text2sql" / "spider"
    tables = parse_sql_schema((spider / "ddl" / f"{db}.sql").read_text())
    gold = [e["query"] for e in json.loads((spider / "dev.json").read_text()) if e["db_id"] == db]
    rng = random.Random(db)
    texts = gold[:12] + [m for query in gold[:12] for m in _mutations(query, rng)]
    current = sql_ebnf(tables)
    compared = _compare(xgr, compiler, info, _without_lookaheads(current), current, texts, qwen_tokenizer, rng)
    assert compared > 1000


def test_generic_grammar_masks_equal_the_reference(xgr_parts, qwen_tokenizer, data_dir) -> None:  # type: ignore[no-untyped-def]
    xgr, compiler, info = xgr_parts
    spider = data_dir / "text2sql" / "spider"
    gold = [e["query"] for e in json.loads((spider / "dev.json").read_text())[::60]]
    rng = random.Random("generic")
    texts = gold + [m for query in gold[:4] for m in _mutations(query, rng)]
    reference = (REFERENCE / "sql_reference_generic.ebnf").read_text()
    compared = _compare(xgr, compiler, info, reference, sql_ebnf(None), texts, qwen_tokenizer, rng)
    assert compared > 300


def test_a_too_narrow_lookahead_is_caught(xgr_parts, qwen_tokenizer, data_dir) -> None:  # type: ignore[no-untyped-def]
    """The check can fail: an alias lookahead without `,` refuses `T1,`-style tokens."""
    xgr, compiler, info = xgr_parts
    spider = data_dir / "text2sql" / "spider"
    tables = parse_sql_schema((spider / "ddl" / "car_1.sql").read_text())
    current = sql_ebnf(tables)
    broken = current.replace("(= [ \\t\\n,);])", "(= [ \\t\\n);])")
    reference = _without_lookaheads(current)
    with pytest.raises(AssertionError):
        _compare(xgr, compiler, info, reference, broken,
                 ["SELECT T1.Maker, T2.Model FROM car_makers AS T1, model_list AS T2"],
                 qwen_tokenizer, random.Random(0))
