"""Structured output for one request: body → `grammars.GrammarSpec` → compiled grammar.

Contract: `spec_from_request` reads `response_format`, `structured_outputs`, legacy `guided_*`
and `tools`/`tool_choice`/`parallel_tool_calls`; any `GrammarError` (unsupported keyword,
bad regex/grammar, unknown tool) becomes a 400 with the error's message and `param`. A
compile failure is never answered with unconstrained text. The compile runs in a worker
thread (the event loop and the engine keep serving) and is bounded by `timeout_s`: past it the
request gets a 400 naming the limit (the compiler enforces the same limit itself; the wait
here is the backstop). A grammar whose first mask allows nothing (e.g. a `$ref` cycle with no
base case) is refused at once with a 400, rather than failing as a dead end mid-generation.
Compile time and cache hit/miss go to the app's metrics. Knows nothing of sampling or HTTP
framing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gateway.errors import APIError
from gateway.gc_heap import HeapFreezer
from gateway.metrics import GatewayMetrics
from grammars import CompiledGrammar, GrammarCompiler, GrammarError, spec_from_request

_CONSTRAINT_FIELDS = (
    "response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "tools",
)


def constraint_param(body: dict[str, Any]) -> str | None:
    """The request field that carries the output constraint (for compile errors, which name
    the keyword but not the field)."""
    for name in _CONSTRAINT_FIELDS:
        if body.get(name) not in (None, [], {}):
            if name == "response_format" and isinstance(body[name], dict):
                kind = body[name].get("type")
                return f"response_format.{kind}" if kind in ("json_schema", "grammar", "sql") else name
            return name
    return None


def grammar_error(exc: GrammarError, *, fallback_param: str | None = None) -> APIError:
    return APIError(exc.message, param=exc.param or fallback_param, code="invalid_grammar")


async def compile_for_request(
    body: dict[str, Any], *, compiler: GrammarCompiler, metrics: GatewayMetrics, timeout_s: float = 10.0,
    heap: HeapFreezer | None = None,
) -> CompiledGrammar | None:
    """The compiled grammar the request asks for, or None when it asks for none. `heap`
    (gateway.gc_heap) is frozen again after the first grammar of a family compiles."""
    try:
        spec = spec_from_request(body)
    except GrammarError as exc:
        raise grammar_error(exc) from exc
    if spec is None:
        return None
    hits_before = _cache_hits(compiler)
    started = time.perf_counter()
    try:
        compiled = await asyncio.wait_for(compiler.compile_async(spec), timeout=timeout_s + 1.0)
    except GrammarError as exc:
        raise grammar_error(exc, fallback_param=constraint_param(body)) from exc
    except TimeoutError as exc:
        raise APIError(f"{spec.kind} grammar compilation exceeded {timeout_s:g} s.",
                       param=constraint_param(body), code="invalid_grammar") from exc
    metrics.grammar_compile.observe(time.perf_counter() - started)
    if not _allows_output(compiler, compiled):
        raise APIError(f"The {spec.kind} constraint allows no output at all (for example a $ref "
                       "cycle with no base case).", param=constraint_param(body), code="invalid_grammar")
    hits_after = _cache_hits(compiler)
    if hits_before is not None and hits_after is not None:
        metrics.grammar_cache.labels(result="hit" if hits_after > hits_before else "miss").inc()
    if heap is not None:
        heap.after_compile(compiled.family)
    return compiled


def _allows_output(compiler: GrammarCompiler, compiled: CompiledGrammar) -> bool:
    """Does the grammar's first mask allow any token (a stop token counts)?"""
    matcher = compiled.matcher()
    bitmask = compiler.allocate_bitmask(1)
    matcher.fill_mask(bitmask, row=0)
    return bool((bitmask != 0).any())


def _cache_hits(compiler: Any) -> int | None:
    info = getattr(compiler, "cache_info", None)
    if info is None:
        return None
    hits = getattr(info(), "hits", None)
    return int(hits) if hits is not None else None
