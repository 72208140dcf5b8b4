"""Schemathesis fuzzing of the real server (tiny engine) against OpenAI's own description of
the API (`../shared/data/openai_api/openapi_chat_subset.json`): positive (schema-valid) and
negative (schema-violating) requests to POST /chat/completions, POST /completions, GET /models
and GET /models/{model}; half the bodies carry the served model id so they reach the engine.

Invariant checked on every answer: never a 5xx and never a hang (30 s per request); a 4xx is
OpenAI's error envelope (validated against `ErrorResponse`) and never FastAPI's `{"detail"}`;
a 2xx is JSON or an SSE stream ending in `[DONE]`. Seeded (derandomized), bounded: 150
examples in CI; `SPECGATE_FUZZ_EXAMPLES=2000 pytest tests/gateway/test_fuzz_openapi.py -s`
for a larger run. Prints the answers by status and code.
"""

from __future__ import annotations

import collections
import os
import pathlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gateway_harness import API_KEY, RunningServer, make_settings, start_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.generation import GenerationMode  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = pathlib.Path(os.environ.get("SPECGATE_SHARED", ROOT.parent / "shared")) / "data" / "openai_api" / "openapi_chat_subset.json"
EXAMPLES = int(os.environ.get("SPECGATE_FUZZ_EXAMPLES", "150"))
TALLY: collections.Counter[str] = collections.Counter()
SLOWEST: list[float] = [0.0]

_schema = schemathesis.openapi.from_path(str(SPEC))
CASES = st.one_of(_schema.as_strategy(GenerationMode.POSITIVE), _schema.as_strategy(GenerationMode.NEGATIVE))


@pytest.fixture(scope="module")
def fuzz_server(tiny_engine_factory: Callable[..., Any]) -> Iterator[RunningServer]:
    from gateway.app import create_app

    engine = tiny_engine_factory(max_model_len=512, grammar_compile_timeout_s=5.0)
    app = create_app(make_settings(max_model_len=512, max_tokens_cap=24, default_max_tokens=8, max_n=2,
                                   grammar_compile_timeout_s=5.0), engine=engine)
    yield from start_server(app, engine)


@pytest.fixture(scope="module")
def fuzz_model(fuzz_server: RunningServer) -> str:
    import httpx

    return str(httpx.get(fuzz_server.v1 + "/models", headers={"Authorization": f"Bearer {API_KEY}"})
               .json()["data"][0]["id"])


def _check(response: Any, openapi: Any, label: str) -> None:
    status = response.status_code
    assert status < 500, f"{label}: {status} {response.text[:500]}"
    if status >= 400:
        data = response.json()
        assert "detail" not in data, f"{label}: {data}"
        openapi.validate(data, "ErrorResponse")
        TALLY[f"{status} {data['error']['code']}"] += 1
    elif "text/event-stream" in str(response.headers.get("content-type", "")):
        assert response.text.rstrip().endswith("data: [DONE]"), f"{label}: {response.text[-300:]}"
        TALLY[f"{status} stream"] += 1
    else:
        response.json()
        TALLY[f"{status} json"] += 1


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(case=CASES, use_model=st.booleans())
def test_fuzz_never_5xx_never_hangs(fuzz_server: RunningServer, fuzz_model: str, openapi: Any,
                                    case: Any, use_model: bool) -> None:
    if use_model and isinstance(case.body, dict):
        case.body["model"] = fuzz_model
    if use_model and case.path_parameters and "model" in case.path_parameters:
        case.path_parameters["model"] = fuzz_model
    t0 = time.perf_counter()
    response = case.call(base_url=fuzz_server.v1, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30)
    SLOWEST[0] = max(SLOWEST[0], time.perf_counter() - t0)
    _check(response, openapi, f"{case.method} {case.path} {str(case.body)[:300]}")


def test_fuzz_report(fuzz_server: RunningServer) -> None:
    """Runs after the fuzz test in this module: prints the tally and checks the server is fine."""
    import httpx

    total = sum(TALLY.values())
    print(f"\nfuzz: {total} requests ({EXAMPLES} examples), no 5xx, no hang; slowest {SLOWEST[0]:.2f} s; "
          f"answers: {dict(sorted(TALLY.items(), key=lambda kv: -kv[1]))}")
    assert httpx.get(fuzz_server.base_url + "/health").status_code == 200
    assert fuzz_server.engine.live_request_ids() == set()
