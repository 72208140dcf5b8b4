"""Real Qwen2.5-Coder 0.5B → 1.5B pair (float32): greedy output with speculation equals greedy
output without, token for token, on 10 JSON-schema prompts, with a fixed K and with adaptive K
from the measured forward costs (serve's default); every finished output validates."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import json_schema_prompt

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]},
    {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}}, "required": ["city"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}, "required": ["tags"]},
    {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]},
    {"type": "object", "properties": {"title": {"type": "string"}, "year": {"type": "integer"}}, "required": ["title", "year"]},
    {"type": "object", "properties": {"lang": {"type": "string"}, "typed": {"type": "boolean"}}, "required": ["lang", "typed"]},
    {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer"}, "maxItems": 4}}, "required": ["items"]},
    {"type": "object", "properties": {"user": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}, "required": ["user"]},
]
PROMPTS = [
    "Give a person named Ann aged 31.", "Describe Paris.", "Is water wet?", "Tag a Python tutorial.",
    "A point on the unit circle.", "Pick a primary color.", "A famous film.", "Describe the Rust language.",
    "List small primes.", "A user with id 7.",
]


@pytest.fixture(scope="module")
def qwen_decoders(require_models: Any) -> Any:
    from engine import EngineConfig, loader
    from engine.torch_engine.decoder import SpecDecoder
    from grammars import GrammarCompiler

    require_models("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")  # pulls if missing; fails, never skips
    from engine.pacing.cost_model import load_or_measure

    names = {"model": "qwen2.5-coder-1.5b", "draft_model": "qwen2.5-coder-0.5b", "dtype": "float32"}
    target, tok = loader.load(names["model"], dtype="float32", device="cpu")
    draft, _ = loader.load(names["draft_model"], dtype="float32", device="cpu")
    plain = SpecDecoder(target_model=target, tokenizer=tok, config=EngineConfig(**names, drafter="none", k=0))
    spec = SpecDecoder(target_model=target, draft_model=draft, tokenizer=tok,
                       config=EngineConfig(**names, drafter="model", k=4, adaptive_k=False))
    costs = load_or_measure(target, draft, k_max=4, target_name=names["model"], draft_name=names["draft_model"])
    adaptive = SpecDecoder(target_model=target, draft_model=draft, tokenizer=tok,  # what serve does by default, in float32
                           config=EngineConfig(**names, drafter="model", k=4, adaptive_k=True), costs=costs)
    compiler = GrammarCompiler(tok, vocab_size=plain.logits_width, stop_token_ids=sorted(plain.stop_token_ids))
    return plain, (spec, adaptive), compiler, tok


def test_greedy_identity_and_validity(qwen_decoders: Any) -> None:
    import jsonschema

    from engine.types import GenerationRequest, SamplingOptions

    plain, specs, compiler, tok = qwen_decoders
    mismatches = []
    for i, (schema, prompt) in enumerate(zip(SCHEMAS, PROMPTS, strict=True)):
        grammar, ids = json_schema_prompt(tok, compiler, schema, prompt)
        sampling = SamplingOptions(temperature=0.0, max_tokens=48)
        a = plain.generate(GenerationRequest(f"p{i}", ids, sampling, grammar=grammar))
        for j, spec in enumerate(specs):  # fixed K=4, then adaptive K from the measured costs
            b = spec.generate(GenerationRequest(f"s{i}", ids, sampling, grammar=grammar))
            if a.output_ids != b.output_ids:
                mismatches.append((i, j, a.output_ids, b.output_ids))
        if a.finish_reason == "stop":
            jsonschema.validate(json.loads(tok.decode(a.output_ids, skip_special_tokens=True)), schema)
    assert not mismatches, mismatches
