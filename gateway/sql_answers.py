"""SQL answers: the sqlite verdict on every choice of a SQL request, and the opt-in retry.

Contract (docs/contracts.md, "SQL answers"):
- `verdict(grammar, text) -> dict | None`: None unless the request's grammar is a SQL
  grammar; else `{"valid", "status", "error", "attempts"}` from `grammars.sql.check` against
  the request's schema (no schema: `valid` None, status "unchecked"). Routers put it on each
  choice as `choice["sql"]`, and on the last chunk of each streamed choice (the one with
  `finish_reason`).
- `check_policy(body, stream)`: a 400 naming `<field>.on_invalid` when "retry" is asked on
  a streamed request (a streamed answer cannot be taken back).
- `reviser(body, grammar, samplings, ctx, request, attempts)`: the `revise` hook the router
  skeleton (`gateway.routers._run.respond`) applies to non-streamed results: None unless the
  request asks for the retry policy; it reruns choices through the engine (a fresh
  `ChoiceRun` per attempt, request id `<id>-<choice>-retry<n>`) and records the attempts
  per choice index in `attempts`.
- `apply_policy(body, grammar, results, samplings, rerun)`: with `on_invalid: "retry"`,
  every choice sqlite refuses is generated again (see grammars.sql.options for the sampling
  of later attempts and the output law this changes) until one runs or `max_attempts` is
  spent; returns the results and the attempts per choice. `usage` then counts the returned
  attempt only; the `sql.attempts` field says how many were made.
Knows nothing of HTTP framing beyond APIError.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from engine import GenerationRequest, SamplingOptions
from gateway.errors import APIError
from gateway.generation import ChoiceResult, ChoiceRun, collect
from grammars import GrammarError
from grammars.sql.check import check_sql
from grammars.sql.options import SqlOptions, sql_options_from_request

Rerun = Callable[[int, SamplingOptions], Awaitable[ChoiceResult]]


def _tables(grammar: Any) -> tuple[bool, dict[str, list[str]] | None]:
    spec = getattr(grammar, "spec", None)
    if spec is None or spec.kind != "sql":
        return False, None
    schema = spec.source_json.get("schema")
    return True, (schema or {}).get("tables")


def verdict(grammar: Any, text: str, *, attempts: int = 1) -> dict[str, Any] | None:
    is_sql, tables = _tables(grammar)
    if not is_sql:
        return None
    if tables is None:
        return {"valid": None, "status": "unchecked", "error": "no schema given: nothing to check against",
                "attempts": attempts}
    return {**check_sql(text, tables).as_dict(), "attempts": attempts}


def _options(body: dict[str, Any]) -> SqlOptions | None:
    try:
        return sql_options_from_request(body)
    except GrammarError as exc:
        raise APIError(exc.message, param=exc.param, code="invalid_grammar") from exc


def check_policy(body: dict[str, Any], *, stream: bool) -> None:
    options = _options(body)
    if options is not None and options.retries and stream:
        field = "response_format" if isinstance(body.get("response_format"), dict) else "structured_outputs"
        raise APIError("on_invalid 'retry' cannot be used with stream=true (a streamed answer cannot be "
                       "taken back); use 'report' or a non-streamed request",
                       param=f"{field}.sql.on_invalid")


async def apply_policy(
    body: dict[str, Any], grammar: Any, results: list[ChoiceResult], samplings: list[SamplingOptions],
    rerun: Rerun,
) -> tuple[list[ChoiceResult], list[int]]:
    options = _options(body)
    attempts = [1] * len(results)
    is_sql, tables = _tables(grammar)
    if options is None or not options.retries or not is_sql or tables is None:
        return results, attempts
    out = list(results)
    for i, result in enumerate(results):
        sampling = samplings[i]
        while attempts[i] < options.max_attempts and not check_sql(out[i].text, tables).valid:
            temperature = sampling.temperature or options.retry_temperature
            seed = None if sampling.seed is None else sampling.seed + attempts[i]
            out[i] = await rerun(result.index, replace(sampling, temperature=temperature, seed=seed))
            attempts[i] += 1
    return out, attempts


def reviser(
    body: dict[str, Any], grammar: Any, samplings: list[SamplingOptions], ctx: Any, request: Any,
    attempts: dict[int, int],
) -> Callable[[list[ChoiceResult]], Awaitable[list[ChoiceResult]]] | None:
    options = _options(body)
    if options is None or not options.retries or not _tables(grammar)[0]:
        return None
    state = ctx.state
    prediction = body.get("prediction", {}).get("content") if isinstance(body.get("prediction"), dict) else None

    async def rerun(index: int, sampling: SamplingOptions) -> ChoiceResult:
        attempt = attempts.get(index, 1) + 1
        run = ChoiceRun(state.engine, GenerationRequest(
            request_id=f"{ctx.request_id}-{index}-retry{attempt}", prompt_token_ids=list(ctx.prompt_ids),
            sampling=sampling, grammar=grammar, prediction=prediction if isinstance(prediction, str) else None,
            tenant=ctx.tenant,
        ), index=index, started=ctx.started)
        state.metrics.in_flight.inc(1)
        try:
            [result] = await collect([run], is_disconnected=request.is_disconnected)
        except Exception as exc:
            raise ctx.mapped(exc) from exc
        finally:
            state.metrics.in_flight.dec(1)
        attempts[index] = attempt
        return result

    async def revise(results: list[ChoiceResult]) -> list[ChoiceResult]:
        revised, _ = await apply_policy(body, grammar, results, samplings, rerun)
        return revised

    return revise
