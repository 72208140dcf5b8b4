"""Grammar-forced spans: canonical tokens of a forced text (`engine.drafters.span`) and the
decoder putting them in the draft chain for free (tiny pair, real Qwen2.5 tokenizer)."""

from __future__ import annotations

from typing import Any

import pytest

from engine.drafters.span import PROBES, ForcedSpans
from engine.types import GenerationRequest, SamplingOptions

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                          "required": ["city"]}}}]
TOOL_BODY = {"tools": TOOLS, "tool_choice": "required"}


@pytest.mark.parametrize("text", ['<tool_call>\n{"name": "get_weather", "arguments": {', 'name":', ' FROM ',
                                  'city": "Par', " and the", "{", '"'])
def test_span_tokens_are_a_prefix_of_every_continuation(qwen_tokenizer: Any, text: str) -> None:
    spans = ForcedSpans(qwen_tokenizer)
    tokens = list(spans.tokens(text))
    assert qwen_tokenizer.decode(tokens) == text[: len(qwen_tokenizer.decode(tokens))]
    for probe in PROBES:
        assert qwen_tokenizer.encode(text + probe)[: len(tokens)] == tokens, probe


def test_span_drops_only_what_the_next_text_may_merge(qwen_tokenizer: Any) -> None:
    spans = ForcedSpans(qwen_tokenizer)
    decode = qwen_tokenizer.decode
    # `":` may become `":"` before a quote: dropped; everything before it stays
    assert [decode([t]) for t in spans.tokens('name":')] == ["name"]
    tool = [decode([t]) for t in spans.tokens('\n{"name": "get_weather", "arguments": {')]
    assert tool[:3] == ["\n", '{"', "name"] and len(tool) >= 9
    assert spans.tokens("") == ()


def test_span_ends_before_an_added_token(qwen_tokenizer: Any) -> None:
    """`<tool_call>` is one added token, but the grammar allows its text in plain pieces too,
    and a model may write those: a span never proposes an added token."""
    spans = ForcedSpans(qwen_tokenizer)
    assert spans.tokens('<tool_call>\n{"name": "get_weather"') == ()
    assert spans.tokens('"}}\n</tool_call>') == spans.tokens('"}}\n')
    assert all(t not in spans.added for t in spans.tokens(' x</tool_call>'))
    assert {qwen_tokenizer.convert_tokens_to_ids(t) for t in ("<tool_call>", "</tool_call>")} <= spans.added


def test_span_cache_is_bounded(qwen_tokenizer: Any) -> None:
    spans = ForcedSpans(qwen_tokenizer, max_texts=2)
    for text in (" and", " the", " or"):
        spans.tokens(text)
    assert list(spans._cache) == [" the", " or"]


def _tool_run(make_decoder: Any, compile_body: Any, tokenizer: Any, **options: Any) -> Any:
    decoder = make_decoder(drafter="model", k=2, **options)
    prompt = list(tokenizer.encode("Weather in Paris?"))
    request = GenerationRequest("tool", prompt, SamplingOptions(temperature=0.0, max_tokens=40),
                                grammar=compile_body(TOOL_BODY))
    return decoder.generate(request)


def test_forced_span_rides_the_chain_and_keeps_greedy_output(
        make_decoder: Any, compile_body: Any, tiny_pair: Any) -> None:
    tokenizer = tiny_pair[2]
    plain = _tool_run(make_decoder, compile_body, tokenizer, span_tokens=0)
    spans = _tool_run(make_decoder, compile_body, tokenizer)
    assert spans.output_ids == plain.output_ids  # token for token (greedy)
    assert tokenizer.decode(spans.output_ids).startswith('<tool_call>\n{"name": "get_weather", "arguments": {')
    # the tool call's forced prefix was drafted without draft forwards, in fewer steps
    assert spans.stats.forced_accepted_tokens >= 8 > plain.stats.forced_accepted_tokens
    assert spans.stats.steps < plain.stats.steps
    assert spans.stats.draft_forwards <= plain.stats.draft_forwards
