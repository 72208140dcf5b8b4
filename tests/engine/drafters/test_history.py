"""Drafts from history: the index (`engine.drafters.history`: longest match, record boundaries,
scopes, bounded memory, the per-sequence trust gate) and the decoder drafting an earlier
output's continuation (tiny pair, real Qwen2.5 tokenizer): greedy output token for token,
one tenant's history never drafted for another."""

from __future__ import annotations

from typing import Any

import pytest

from engine.drafters.history import (
    MAX_MISSES,
    MIN_ACCEPTANCE,
    N_MAX,
    TRIAL,
    HistoryDrafts,
    HistoryIndex,
)
from engine.types import GenerationRequest, SamplingOptions

A = ("tenant-a", "json")
B = ("tenant-b", "json")


def test_continuation_follows_the_longest_match_and_stops_at_the_record_end() -> None:
    index = HistoryIndex()
    index.record(A, prompt=[1, 2], output=[10, 11, 12, 13])
    index.record(A, prompt=[1, 2], output=[10, 11, 20, 21])  # later: wins for the 2-gram (10, 11)
    assert index.continuation(A, [5, 10, 11], k=4) == [20, 21]  # not past the record's end
    assert index.continuation(A, [12, 10, 11], k=4) == [20, 21]
    # a longer match picks the older record: (11, 12) occurs only there
    assert index.continuation(A, [11, 12], k=1) == [13]
    # the prompt tail is context for the first output token
    assert index.continuation(A, [9, 1, 2], k=2) == [10, 11]
    assert index.continuation(A, [3, 4], k=2) == []
    assert index.continuation(A, [11], k=2) == []  # one token is no context


def test_scopes_never_share_records() -> None:
    index = HistoryIndex()
    index.record(A, prompt=[1, 2], output=[10, 11, 12])
    assert index.continuation(B, [1, 2], k=3) == []
    assert index.continuation(("tenant-a", ("spec", 7)), [1, 2], k=3) == []
    assert index.continuation(A, [1, 2], k=3) == [10, 11, 12]


def test_the_bound_holds_and_the_least_recent_scope_goes_first() -> None:
    index = HistoryIndex(max_tokens=40)
    index.record(A, prompt=[1, 2], output=list(range(100, 110)))
    index.record(B, prompt=[1, 2], output=list(range(200, 210)))
    index.record(B, prompt=[1, 2], output=list(range(300, 310)))
    assert index.tokens <= 40
    index.record(B, prompt=[1, 2], output=list(range(400, 410)))  # A is the least recently used
    assert index.tokens <= 40
    assert index.continuation(A, [1, 2], k=2) == []
    assert index.continuation(B, [1, 2], k=2) == [400, 401]
    for i in range(50):  # one scope alone: its oldest records go, lookups skip what went
        index.record(B, prompt=[1, 2], output=[500 + i, 600 + i, 700])
        assert index.tokens <= 40
    assert index.continuation(B, [1, 2], k=1) == [549]
    assert index.continuation(B, [400, 401], k=1) == []
    index.record(A, prompt=[], output=list(range(1000)))  # longer than the bound: its tail is kept
    assert index.tokens <= 40 and index.continuation(A, [997, 998], k=3) == [999]


def test_prompt_tail_is_bounded() -> None:
    index = HistoryIndex()
    index.record(A, prompt=list(range(50)), output=[99])
    assert index.tokens == N_MAX + 1


def test_a_sequence_and_a_scope_stop_proposing_history_that_misses() -> None:
    index = HistoryIndex()
    index.record(A, prompt=[1, 2], output=[10, 11])
    drafts = HistoryDrafts(index, A)
    drafts.observe(judged=MAX_MISSES, accepted=0)
    assert drafts.continuation([1, 2], k=2) == [10, 11]  # a few misses are tolerated
    drafts.observe(judged=1, accepted=0)
    assert drafts.continuation([1, 2], k=2) == []  # this sequence stops asking
    assert HistoryDrafts(index, A).trusted  # the scope: fewer than TRIAL judged
    HistoryDrafts(index, A).observe(judged=TRIAL, accepted=TRIAL)  # scope: 11 judged, 8 accepted
    assert HistoryDrafts(index, A).trusted
    HistoryDrafts(index, A).observe(judged=2 * TRIAL, accepted=0)  # scope: 27 judged, 8 accepted
    assert not HistoryDrafts(index, A).trusted and HistoryDrafts(index, B).trusted is False  # B: nothing recorded
    index.record(B, prompt=[1, 2], output=[10, 11])
    assert HistoryDrafts(index, B).trusted  # scopes keep their own record
    for _ in range(5):  # every output recorded in A decays its record: it is tried again
        index.record(A, prompt=[1, 2], output=[10, 11])
    assert HistoryDrafts(index, A).trusted
    assert MIN_ACCEPTANCE == 0.5


@pytest.mark.parametrize("bad", [0, -1])
def test_the_bound_must_be_positive(bad: int) -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        HistoryIndex(max_tokens=bad)


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                          "required": ["city"]}}}]


def _run(decoder: Any, grammar: Any, tokenizer: Any, *, tenant: str, temperature: float = 0.0) -> Any:
    prompt = list(tokenizer.encode("Weather in Paris?"))
    request = GenerationRequest("h", prompt, SamplingOptions(temperature=temperature, max_tokens=40, seed=3),
                                grammar=grammar, tenant=tenant)
    return decoder.generate(request)


def test_an_earlier_output_is_drafted_and_greedy_output_is_unchanged(
        make_decoder: Any, compile_body: Any, tiny_pair: Any) -> None:
    tokenizer = tiny_pair[2]
    grammar = compile_body({"tools": TOOLS, "tool_choice": "required"})
    plain = _run(make_decoder(drafter="none", k=0), grammar, tokenizer, tenant="a")
    decoder = make_decoder(drafter="model", k=4, adaptive_k=False)
    first = _run(decoder, grammar, tokenizer, tenant="a")
    again = _run(decoder, grammar, tokenizer, tenant="a")
    other = _run(decoder, grammar, tokenizer, tenant="b")
    assert first.output_ids == again.output_ids == other.output_ids == plain.output_ids  # token for token
    assert first.stats.region_drafts.get("history", 0) == 0  # nothing recorded yet
    drafted = again.stats.region_drafts.get("history", 0)
    assert drafted > 0 and again.stats.region_accepted.get("history", 0) == drafted  # the same greedy text
    assert again.stats.draft_forwards < first.stats.draft_forwards  # history drafts need no forward
    # the whole answer again, in the splits this model wrote (not the forced texts' canonical ones)
    assert again.stats.steps * 3 <= first.stats.steps
    assert other.stats.region_drafts.get("history", 0) == 0  # another tenant's history is never read
    off = make_decoder(drafter="model", k=4, adaptive_k=False, history_tokens=0)
    _run(off, grammar, tokenizer, tenant="a")
    assert _run(off, grammar, tokenizer, tenant="a").stats.region_drafts.get("history", 0) == 0


def test_unmasked_drafters_draw_nothing_from_history(make_decoder: Any, compile_body: Any, tiny_pair: Any) -> None:
    tokenizer = tiny_pair[2]
    grammar = compile_body({"tools": TOOLS, "tool_choice": "required"})
    decoder = make_decoder(drafter="model", k=4, adaptive_k=False, draft_mask=False)
    _run(decoder, grammar, tokenizer, tenant="a")
    assert _run(decoder, grammar, tokenizer, tenant="a").stats.region_drafts.get("history", 0) == 0


def test_a_seeded_sampled_request_draws_the_same_sample_again(
        make_decoder: Any, compile_body: Any, tiny_pair: Any) -> None:
    tokenizer = tiny_pair[2]
    grammar = compile_body({"tools": TOOLS, "tool_choice": "required"})
    decoder = make_decoder(drafter="model", k=4, adaptive_k=False)
    _run(decoder, grammar, tokenizer, tenant="a", temperature=0.0)  # history holds this prompt's output
    first = _run(decoder, grammar, tokenizer, tenant="a", temperature=0.9)
    again = _run(decoder, grammar, tokenizer, tenant="a", temperature=0.9)
    assert first.output_ids == again.output_ids
    assert "history" not in first.stats.region_drafts and "history" not in again.stats.region_drafts
