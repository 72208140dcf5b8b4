"""Engine comparison on the real Qwen 0.5B → 1.5B pair: acceptance with the draft masked vs
unmasked (argmax, vLLM's way) vs unconstrained generation, and tokens/s with and without
speculation. Prints a table; asserts nothing.

    .venv/bin/python -m benchmarks.engine_compare [--max-tokens 64] [--dtype bfloat16] [--prompts 6]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string"}}, "required": ["name", "age", "email"]},
    {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}, "population": {"type": "integer"}}, "required": ["city", "country", "population"]},
    {"type": "object", "properties": {"title": {"type": "string"}, "year": {"type": "integer"}, "genres": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}, "required": ["title", "year", "genres"]},
    {"type": "object", "properties": {"product": {"type": "string"}, "price": {"type": "number"}, "in_stock": {"type": "boolean"}}, "required": ["product", "price", "in_stock"]},
    {"type": "object", "properties": {"language": {"type": "string"}, "paradigms": {"type": "array", "items": {"type": "string"}, "maxItems": 4}}, "required": ["language", "paradigms"]},
    {"type": "object", "properties": {"user": {"type": "object", "properties": {"id": {"type": "integer"}, "roles": {"type": "array", "items": {"enum": ["admin", "dev", "ops"]}}}, "required": ["id", "roles"]}}, "required": ["user"]},
]
PROMPTS = [
    "Extract: Jane Roe, 42, jane@example.com.", "Describe Lyon, France.", "Describe the film Alien (1979).",
    "A 14-inch laptop for 999.99 dollars, available now.", "Describe Haskell.", "User 17 is an admin and a dev.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("-k", type=int, default=4)
    args = parser.parse_args()

    from engine import loader
    from engine.decoder import SpecDecoder, stop_token_ids
    from engine.types import GenerationRequest, SamplingOptions
    from grammars import GrammarCompiler, spec_from_request

    target, tok = loader.load("qwen2.5-coder-1.5b", dtype=args.dtype, device="cpu")
    draft, _ = loader.load("qwen2.5-coder-0.5b", dtype=args.dtype, device="cpu")
    runs = {
        "plain (no spec), schema": (SpecDecoder(target_model=target, tokenizer=tok, drafter="none", k=0), True),
        "spec masked draft, schema": (SpecDecoder(target_model=target, draft_model=draft, tokenizer=tok, k=args.k), True),
        "spec unmasked argmax, schema": (SpecDecoder(target_model=target, draft_model=draft, tokenizer=tok, k=args.k, draft_mask=False), True),
        "spec ngram+forced, schema": (SpecDecoder(target_model=target, tokenizer=tok, drafter="ngram", k=args.k), True),
        "spec draft, unconstrained": (SpecDecoder(target_model=target, draft_model=draft, tokenizer=tok, k=args.k), False),
    }
    compiler = GrammarCompiler(tok, vocab_size=runs["plain (no spec), schema"][0].logits_width,
                               stop_token_ids=sorted(stop_token_ids(target, tok)))
    print(f"{'run':32} {'accept':>7} {'tok/step':>8} {'tok/s':>7} {'tokens':>6} {'steps':>5}")
    for name, (decoder, constrained) in runs.items():
        drafted = accepted = tokens = steps = 0
        seconds = 0.0
        for i, (schema, prompt) in enumerate(list(zip(SCHEMAS, PROMPTS, strict=True))[: args.prompts]):
            body = {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
            grammar = compiler.compile(spec_from_request(body)) if constrained else None
            messages = [{"role": "user", "content": f"{prompt} Answer in JSON matching {json.dumps(schema)}"}]
            ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            ids = list(ids if isinstance(ids, list) else ids["input_ids"])
            t0 = time.perf_counter()
            seq = decoder.generate(GenerationRequest(str(i), ids, SamplingOptions(temperature=0.0, max_tokens=args.max_tokens), grammar=grammar))
            seconds += time.perf_counter() - t0
            drafted += seq.stats.draft_tokens
            accepted += seq.stats.accepted_tokens
            tokens += len(seq.output_ids)
            steps += seq.stats.steps
        rate = accepted / drafted if drafted else float("nan")
        print(f"{name:32} {rate:7.3f} {tokens / steps:8.2f} {tokens / seconds:7.2f} {tokens:6d} {steps:5d}", flush=True)


if __name__ == "__main__":
    main()
