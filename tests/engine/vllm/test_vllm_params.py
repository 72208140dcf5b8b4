"""Request translation for the vLLM engine: specgate's compiled grammars reach vLLM as EBNF
that recompiles to the same token masks; speculative config from the drafter flags."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine import EngineConfig, GenerationRequest, SamplingOptions
from engine.vllm.params import grammar_source, sampling_params_for, speculative_config_for
from grammars import GrammarCompiler, spec_from_request

V = 151_936
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
BODIES: dict[str, dict[str, Any]] = {
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {
        "type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
        "required": ["n", "s"]}}}},
    # a schema the auto backend gives llguidance (maxLength): the vLLM path compiles it with xgrammar
    "json_schema_auto_llguidance": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "q", "schema": {"type": "object", "properties": {"id": {"type": "string", "maxLength": 12}},
                                "required": ["id"]}}}},
    "json_object": {"response_format": {"type": "json_object"}},
    "tools_required": {"tools": TOOLS, "tool_choice": "required"},
    "tools_auto": {"tools": TOOLS, "tool_choice": "auto"},
    "regex": {"structured_outputs": {"regex": "[a-c]{2,4}x"}},
    "choice": {"structured_outputs": {"choice": ["yes", "no"]}},
}
PATHS = {
    "json_schema": '{"n": 12, "s": "hi"}',
    "json_schema_auto_llguidance": '{"id": "ab12"}',
    "json_object": '{"a": [1, 2]}',
    "tools_required": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "tools_auto": "Sure.",
    "regex": "abcx",
    "choice": "no",
}


@pytest.fixture(scope="module")
def compiler(qwen_tokenizer: Any) -> GrammarCompiler:
    return GrammarCompiler(qwen_tokenizer, vocab_size=V)


@pytest.fixture(scope="module")
def xgr_compiler(compiler: GrammarCompiler, qwen_tokenizer: Any) -> Any:
    import xgrammar as xgr

    from grammars.backends.xgrammar.backend import text_tokenizer_info
    from grammars.vocabulary import TokenizerVocabulary

    # what the plugin gives vLLM's XgrammarBackend (install_text_vocabulary): eos as its stop,
    # non-text entries and control tokens special; per-request stops come as overrides
    eos = [qwen_tokenizer.eos_token_id]
    info = text_tokenizer_info(qwen_tokenizer, vocab_size=V, stop_token_ids=eos,
                               excluded=TokenizerVocabulary(qwen_tokenizer).excluded_ids(eos))
    return xgr.GrammarCompiler(info)


@pytest.mark.parametrize("name", sorted(BODIES))
def test_ebnf_round_trip_gives_identical_masks(name: str, compiler: GrammarCompiler, xgr_compiler: Any,
                                               qwen_tokenizer: Any) -> None:
    import xgrammar as xgr

    compiled = compiler.compile(spec_from_request({"model": "m", "messages": [], **BODIES[name]}))
    ebnf = grammar_source(compiled)
    # what vLLM's XgrammarBackend does with a `grammar` request, for the target (scheduler) and
    # the draft (plugin) alike: compile_grammar(ebnf), the request's stop ids as overrides
    theirs = xgr.GrammarMatcher(xgr_compiler.compile_grammar(ebnf),
                                override_stop_tokens=list(compiler.stop_token_ids))
    ours = compiled.matcher()
    words = (V + 31) // 32
    mask_ours = torch.zeros(1, words, dtype=torch.int32)
    mask_theirs = torch.zeros(1, words, dtype=torch.int32)
    tokens = qwen_tokenizer.encode(PATHS[name], add_special_tokens=False)
    for tok in tokens:
        ours.fill_mask(mask_ours, 0)
        theirs.fill_next_token_bitmask(mask_theirs, 0)
        assert torch.equal(mask_ours, mask_theirs)
        assert ours.accept_token(tok) and theirs.accept_token(tok)


def test_grammar_source_needs_xgrammar(qwen_tokenizer: Any) -> None:
    outlines = GrammarCompiler(qwen_tokenizer, vocab_size=V, backend="outlines")
    compiled = outlines.compile(spec_from_request({"structured_outputs": {"regex": "ab"}}))
    with pytest.raises(ValueError, match="xgrammar"):
        grammar_source(compiled)
    # "auto" compiles JSON schemas with llguidance: the vLLM engine (whose compiler is always
    # xgrammar, so draft and target share xgrammar masks) never receives one
    auto = GrammarCompiler(qwen_tokenizer, vocab_size=V, backend="auto")
    compiled = auto.compile(spec_from_request({"guided_json": {"type": "integer"}}))
    assert compiled.backend == "llguidance"
    with pytest.raises(ValueError, match="xgrammar"):
        grammar_source(compiled)


def test_speculative_config_for_drafters() -> None:
    cfg = EngineConfig(model="t", draft_model="d", drafter="model", k=3)
    assert speculative_config_for(cfg, draft_model_path="/d") == {
        "method": "draft_model", "model": "/d", "num_speculative_tokens": 3,
        "draft_sample_method": "probabilistic"}
    ngram = speculative_config_for(EngineConfig(model="t", drafter="ngram", k=5), draft_model_path=None)
    assert ngram is not None and ngram["method"] == "ngram" and ngram["num_speculative_tokens"] == 5
    assert speculative_config_for(EngineConfig(model="t", drafter="none"), draft_model_path=None) is None
    with pytest.raises(ValueError, match="forced"):
        speculative_config_for(EngineConfig(model="t", drafter="forced"), draft_model_path=None)


@pytest.mark.vllm  # skipped only in a build made with SPECGATE_SKIP_VLLM=1
def test_sampling_params_carry_grammar_and_mask_switch(compiler: GrammarCompiler) -> None:
    from vllm.sampling_params import RequestOutputKind

    compiled = compiler.compile(spec_from_request(BODIES["json_schema"]))
    req = GenerationRequest(request_id="r", prompt_token_ids=[1, 2],
                            sampling=SamplingOptions(temperature=0.7, top_k=5, max_tokens=9, stop=("END",), seed=3),
                            grammar=compiled, draft_mask=False)
    sp = sampling_params_for(req, stop_token_ids=[151645])
    assert sp.structured_outputs is not None and sp.structured_outputs.grammar == grammar_source(compiled)
    assert sp.extra_args == {"specgate_draft_mask": False}
    assert (sp.temperature, sp.top_k, sp.max_tokens, sp.seed, sp.stop) == (0.7, 5, 9, 3, ["END"])
    assert sp.output_kind == RequestOutputKind.DELTA
    free = sampling_params_for(GenerationRequest(request_id="f", prompt_token_ids=[1]))
    assert free.structured_outputs is None and not free.extra_args


def test_vllm_stats_count_proposed_drafts_like_the_torch_engine() -> None:
    """vLLM's per-request metrics count only drafts that survived its grammar cut; specgate
    reports K proposed per decode step so acceptance means the same on both engines."""
    from types import SimpleNamespace

    from engine.stats import RequestStats
    from engine.vllm.engine import _fill_spec_stats

    stats = RequestStats(completion_tokens=20)
    metrics = SimpleNamespace(histogram=[1, 2, 0, 1, 2], num_draft_tokens=18)  # 6 spec steps, 13 accepted
    _fill_spec_stats(stats, metrics, engine_steps=8, k=4)
    assert (stats.steps, stats.spec_steps, stats.draft_tokens, stats.accepted_tokens) == (8, 6, 18, 13)
    assert stats.proposed_tokens == 32 and stats.acceptance_rate == 13 / 32
