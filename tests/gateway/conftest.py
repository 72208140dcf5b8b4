"""Gateway test fixtures: OpenAPI validator, the REAL torch engine on the tiny random Qwen pair,
and one real uvicorn server per test module (helpers in gateway_harness)."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gateway_harness import (
    API_KEY,
    OpenAPIValidator,
    RunningServer,
    SpyEngine,
    make_settings,
    start_server,
)


@pytest.fixture(scope="session")
def openapi(data_dir: pathlib.Path) -> OpenAPIValidator:
    return OpenAPIValidator(data_dir / "openai_api" / "openapi_chat_subset.json")


@pytest.fixture(scope="session")
def tiny_engine_factory(tiny_target_dir: pathlib.Path, tiny_draft_dir: pathlib.Path) -> Callable[..., Any]:
    """`factory(**EngineConfig overrides) -> SpyEngine` over a real engine (float32, K=4)."""

    def factory(**overrides: Any) -> SpyEngine:
        from engine import EngineConfig, build_engine

        kwargs: dict[str, Any] = {
            "model": str(tiny_target_dir), "draft_model": str(tiny_draft_dir), "dtype": "float32",
            "max_model_len": 1024, "k": 4, "adaptive_k": False,  # fixed K: tiny models' timings are noise
        }
        kwargs.update(overrides)
        return SpyEngine(build_engine(EngineConfig(**kwargs)))

    return factory


@pytest.fixture(scope="module")
def server(tiny_engine_factory: Callable[..., Any]) -> Iterator[RunningServer]:
    """One real server per test module: tiny target + tiny draft, float32, K=4, API key set."""
    from gateway.app import create_app

    engine = tiny_engine_factory()
    app = create_app(make_settings(), engine=engine)
    yield from start_server(app, engine)


@pytest.fixture()
def client(server: RunningServer) -> Any:
    import openai

    return openai.OpenAI(base_url=server.v1, api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture()
def http(server: RunningServer) -> Iterator[Any]:
    import httpx

    with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120) as c:
        yield c


@pytest.fixture()
def model_id(http: Any) -> str:
    return str(http.get("/v1/models").json()["data"][0]["id"])
