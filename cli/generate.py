"""`specgate generate`: one prompt through the engine `specgate serve` would build (same
engine flags, generated from the settings), optionally grammar-constrained.

The prompt is one user message under the model's chat template. The grammar comes from
`grammars.spec_from_request` on an equivalent OpenAI request body (the same path the server
uses). Prints the text, then ONE JSON object on the last line:
`{"text", "finish_reason", "stats": {"draft_tokens", "accepted_tokens", "acceptance_rate",
"steps", "tokens_per_second"}}`. Heavy imports happen inside `run`.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any


def _request_body(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.json_schema:
        schema = json.loads(pathlib.Path(args.json_schema).read_text())
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "cli", "schema": schema, "strict": True}}}
    if args.regex:
        return {"structured_outputs": {"regex": args.regex}}
    if args.grammar:
        return {"structured_outputs": {"grammar": pathlib.Path(args.grammar).read_text()}}
    if args.sql_schema:
        schema_text = pathlib.Path(args.sql_schema).read_text()
        return {"response_format": {"type": "sql", "sql": {"dialect": "sqlite", "schema": schema_text}}}
    return None


def run(args: argparse.Namespace) -> int:
    import asyncio

    from cli.flags import settings_overrides
    from engine import GenerationRequest, SamplingOptions, build_engine
    from gateway.settings import GatewaySettings
    from grammars import spec_from_request

    settings = GatewaySettings(**settings_overrides(args, GatewaySettings))
    engine = build_engine(settings.engine_config())
    body = _request_body(args)
    grammar = None
    if body is not None:
        spec = spec_from_request(body)
        grammar = engine.grammar_compiler.compile(spec) if spec is not None else None
    prompt_ids = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": args.prompt}], add_generation_prompt=True, tokenize=True
    )
    if not isinstance(prompt_ids, list):  # a BatchEncoding in transformers 5
        prompt_ids = prompt_ids["input_ids"]
    sampling = SamplingOptions(
        temperature=args.temperature, top_p=args.top_p, seed=args.seed, max_tokens=args.max_tokens
    )
    request = GenerationRequest("cli", list(prompt_ids), sampling, grammar=grammar)

    async def go() -> tuple[str, Any]:
        await engine.start()
        text, last = "", None
        try:
            async for delta in engine.generate(request):
                text += delta.text
                last = delta
        finally:
            await engine.shutdown()
        return text, last

    text, last = asyncio.run(go())
    stats = last.stats
    print(json.dumps({
        "text": text,
        "finish_reason": last.finish_reason,
        "stats": {
            "draft_tokens": stats.draft_tokens,
            "accepted_tokens": stats.accepted_tokens,
            "acceptance_rate": stats.acceptance_rate,
            "steps": stats.steps,
            "tokens_per_second": stats.tokens_per_second,
        },
    }))
    return 0


def register(subparsers: Any) -> None:
    from cli.flags import add_settings_flags
    from gateway.settings import ENGINE_FIELDS, GatewaySettings

    p = subparsers.add_parser("generate", help="generate once (speculative, grammar-masked), as `serve` would")
    add_settings_flags(p, GatewaySettings, only=ENGINE_FIELDS)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--max-tokens", type=int, default=256)
    group = p.add_mutually_exclusive_group()
    group.add_argument("--json-schema", metavar="FILE")
    group.add_argument("--regex", metavar="R")
    group.add_argument("--grammar", metavar="FILE", help="EBNF/Lark grammar file")
    group.add_argument("--sql-schema", metavar="FILE")
    p.add_argument("--prompt", required=True)
    p.set_defaults(func=run)
