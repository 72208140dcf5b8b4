"""The hf-assisted peer's grammar processor: its state follows input_ids (rollback included),
and HF assisted generation under it is token-for-token HF greedy under the same grammar."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import torch

from benchmarks.suite.hf_processor import PrefixGrammarProcessor

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


@pytest.fixture(scope="module")
def compiled(qwen_tokenizer: Any) -> Any:
    from grammars import GrammarCompiler, spec_from_request

    compiler = GrammarCompiler(qwen_tokenizer, vocab_size=151_936, stop_token_ids=[151645, 151643])
    body = {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}}
    return compiler.compile(spec_from_request(body))


def _fresh_mask(compiled: Any, tokens: list[int], vocab: int) -> torch.Tensor:
    matcher = compiled.matcher()
    for token in tokens:
        assert matcher.accept_token(token)
    from sampler import allocate_token_bitmask, apply_token_bitmask_

    bitmask = allocate_token_bitmask(1, vocab)
    matcher.fill_mask(bitmask, 0)
    logits = torch.zeros(1, vocab)
    apply_token_bitmask_(logits, bitmask)
    return torch.isfinite(logits)


def test_state_follows_input_ids_out_of_order(compiled: Any, qwen_tokenizer: Any) -> None:
    vocab = 151_936
    prompt = [1, 2, 3]
    text_ids = qwen_tokenizer.encode('{"name": "Al", "age": 7}')
    processor = PrefixGrammarProcessor(compiled._handle, prompt_len=len(prompt))
    # HF's assisted order: drafts run ahead, verify walks the prefix again, a rejection rolls back
    for cut in (4, 1, 3, 2, len(text_ids), 0, 5):
        ids = torch.tensor([prompt + text_ids[:cut]])
        allowed = torch.isfinite(processor(ids, torch.zeros(1, vocab)))
        assert torch.equal(allowed, _fresh_mask(compiled, text_ids[:cut], vocab)), cut
    assert processor.rollbacks > 0
    with pytest.raises(ValueError, match="refused by the grammar"):
        processor(torch.tensor([prompt + qwen_tokenizer.encode("]")]), torch.zeros(1, vocab))


def test_assisted_greedy_equals_plain_greedy_under_the_grammar(
    compiled: Any, tiny_target_dir: pathlib.Path, tiny_draft_dir: pathlib.Path, qwen_tokenizer: Any,
) -> None:
    from transformers import AutoModelForCausalLM, GenerationConfig

    target = AutoModelForCausalLM.from_pretrained(str(tiny_target_dir), dtype=torch.float32).eval()
    draft = AutoModelForCausalLM.from_pretrained(str(tiny_draft_dir), dtype=torch.float32).eval()
    draft.generation_config.num_assistant_tokens = 3
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0
    rolled_back = 0
    for prompt in ("Give me a person as JSON.", "Name and age, please:"):
        ids = torch.tensor([qwen_tokenizer.encode(prompt)])
        config = GenerationConfig(max_new_tokens=20, do_sample=False, eos_token_id=[151645, 151643],
                                  pad_token_id=151643)
        outputs = []
        for assistant in (None, draft):
            processor = PrefixGrammarProcessor(compiled._handle, prompt_len=ids.shape[1])
            with torch.no_grad():
                out = target.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config,
                                      assistant_model=assistant, logits_processor=[processor])
            outputs.append(out[0, ids.shape[1]:].tolist())
            if assistant is not None:
                rolled_back += processor.rollbacks
        assert outputs[0] == outputs[1], prompt
        matcher = compiled.matcher()
        assert all(matcher.accept_token(token) for token in outputs[1])
    assert rolled_back > 0  # the tiny draft disagrees sometimes: the rollback path ran
