"""engine.pacing.pacing_keys + the decoder: what the engine learns for pacing (output lengths, the
pair's acceptance) generalizes from one schema to a new one of the same grammar family."""

from __future__ import annotations

from typing import Any

import pytest

from engine.pacing.acceptance_model import AcceptancePriors, FamilyAcceptance
from engine.pacing.cost_model import ForwardCosts
from engine.pacing.pacing_keys import pacing_keys
from engine.types import GenerationRequest, SamplingOptions

SINGERS = "CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);"
SHIPS = "CREATE TABLE ship (ship_id INTEGER PRIMARY KEY, port TEXT, tonnage REAL, built INTEGER);"
ORDERS = "CREATE TABLE orders (order_id INTEGER PRIMARY KEY, client TEXT, total REAL);"


def sql_body(ddl: str) -> dict[str, Any]:
    return {"response_format": {"type": "sql", "sql": {"dialect": "sqlite", "schema": ddl}}}


def test_keys_go_from_the_exact_grammar_to_its_family(compile_body: Any) -> None:
    singers, ships = pacing_keys(compile_body(sql_body(SINGERS))), pacing_keys(compile_body(sql_body(SHIPS)))
    assert singers.family == ships.family == "sql_schema:sqlite"
    assert singers.lengths[0] != ships.lengths[0]  # exact grammars differ ...
    assert singers.lengths[1:] == ships.lengths[1:] == (("family", "sql_schema:sqlite"), ("kind", "sql"))
    assert singers.levels == ("exact", "family", "kind")
    assert all("singer" not in str(key) for key in singers.lengths)  # no schema text in a key
    json_keys = pacing_keys(compile_body({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}}))
    assert json_keys.family == "json_schema" and json_keys.levels == ("exact", "kind")  # family = kind: one key
    assert pacing_keys(None).lengths == (("kind", "text"),) and pacing_keys(None).family == "text"
    assert singers.level(("family", "sql_schema:sqlite")) == "family" and singers.level(None) == ""


def test_a_family_starts_from_its_drafter_kind_and_then_speaks_for_itself() -> None:
    priors = AcceptancePriors(depth=4, max_families=2)
    pooled = priors.shared("model")
    for _ in range(20):
        pooled.observe(num_drafts=4, num_accepted=4)
    sql = priors.shared("model", "sql_schema:sqlite")
    assert isinstance(sql, FamilyAcceptance) and sql.observed  # the pair is known: a new family starts there
    assert sql.hazards() == pytest.approx(pooled.hazards())
    json = priors.shared("model", "json_schema")
    for _ in range(20):
        json.observe(num_drafts=4, num_accepted=4)
    for _ in range(40):
        sql.observe(num_drafts=4, num_accepted=0)
    assert sql.hazards()[0] < 0.1  # the family's own acceptance once observed ...
    assert min(json.hazards()) > 0.9 > pooled.hazards()[0]  # ... another family keeps its own
    assert priors.shared("model", "sql_schema:sqlite").hazards() == pytest.approx(sql.hazards())  # kept
    priors.shared("model", "tools:auto")  # a third family: the least recently used (json_schema) goes
    assert priors.families("model") == ["sql_schema:sqlite", "tools:auto"]
    with pytest.raises(ValueError):
        AcceptancePriors(depth=4, max_families=0)


PLAIN_S = 0.2
# flat verify and a near-free draft (drafting pays even at the random pair's acceptance); the
# draft's prompt prefill costs 6 plain steps, so a request rents 6 plain steps where no record covers it
FLAT = ForwardCosts(target_s=(PLAIN_S,) * 5, draft_s=0.002, draft_prefill_s=6 * PLAIN_S / 40)


def _run(decoder: Any, prompt: list[int], grammar: Any, max_tokens: int = 24) -> Any:
    return decoder.generate(GenerationRequest("r", prompt, SamplingOptions(temperature=0.0, max_tokens=max_tokens),
                                              grammar=grammar))


def _prompt(tokenizer: Any, ddl: str) -> list[int]:
    ids = list(tokenizer.encode(f"{ddl}\nWrite one SQLite query listing every row.\n"))
    assert 20 <= len(ids) <= 60  # the catch-up FLAT prices at 3-9 plain steps
    return ids


def test_a_new_schema_of_a_known_family_drafts_from_its_first_decode_step(
        make_decoder: Any, tiny_pair: Any, compile_body: Any) -> None:
    """Schema-aware SQL on three schemas, one engine: the first schema's request rents plain
    steps before the draft prefills (nothing recorded); a second, never seen schema drafts at
    its first decode step, paced by the family's record; a schema's own record decides once it
    has one. Greedy output stays that of plain decoding."""
    tokenizer = tiny_pair[2]
    decoder = make_decoder(drafter="model", k=4, adaptive_k=True, costs=FLAT, history_tokens=0)  # history would draft a repeat at once
    plain = make_decoder(drafter="none", k=0)
    first = _run(decoder, _prompt(tokenizer, SINGERS), compile_body(sql_body(SINGERS)))
    assert first.stats.pacing_record == "" and first.stats.first_draft_step > 2  # rented
    new = compile_body(sql_body(SHIPS))
    second = _run(decoder, _prompt(tokenizer, SHIPS), new)
    assert second.stats.pacing_record == "family"
    assert second.stats.first_draft_step == 2  # step 1 is the target's prefill: drafting from the first decode step
    assert second.output_ids == _run(plain, _prompt(tokenizer, SHIPS), new).output_ids
    again = _run(decoder, _prompt(tokenizer, SHIPS), new)
    assert again.stats.pacing_record == "exact" and again.stats.first_draft_step == 2
    other_family = make_decoder(drafter="model", k=4, adaptive_k=True, costs=FLAT)
    _run(other_family, list(tokenizer.encode("Name some animals: cat dog emu cat dog emu")),
         compile_body({"structured_outputs": {"regex": "[a-z]{1,8}( [a-z]{1,8}){7}"}}))
    unrelated = _run(other_family, _prompt(tokenizer, ORDERS), compile_body(sql_body(ORDERS)))
    assert unrelated.stats.pacing_record == "" and unrelated.stats.first_draft_step > 2  # no SQL record: rental
