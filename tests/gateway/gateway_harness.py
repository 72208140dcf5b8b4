"""Gateway test harness (helpers, imported by conftest and test modules): a real uvicorn server
on loopback in a thread, an engine spy recording `abort` calls, settings for tests, and a
validator of OpenAI objects against the official OpenAPI description (3.1 → JSON Schema
2020-12; the few OpenAPI-3.0 `nullable: true` left in that file are rewritten to null unions
so `finish_reason: null` and `usage: null` in stream chunks validate as OpenAI's SDKs expect).
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

API_KEY = "test-key"


def _null_unions(node: Any) -> Any:
    if isinstance(node, list):
        return [_null_unions(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _null_unions(v) for k, v in node.items()}
    if out.pop("nullable", False) is True:
        if "$ref" in out:
            ref = out.pop("$ref")
            out = {**out, "anyOf": [{"$ref": ref}, {"type": "null"}]}
        else:
            if "type" in out:
                kind = out["type"]
                out["type"] = [*kind, "null"] if isinstance(kind, list) else [kind, "null"]
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
    return out


class OpenAPIValidator:
    def __init__(self, spec_path: pathlib.Path) -> None:
        from jsonschema import Draft202012Validator
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT202012

        doc = _null_unions(json.loads(spec_path.read_text()))
        resource = Resource.from_contents(doc, default_specification=DRAFT202012)
        self._registry = Registry().with_resource("urn:openai-openapi", resource)
        self._validators: dict[str, Any] = {}
        self._cls = Draft202012Validator
        self.schemas = doc["components"]["schemas"]

    def validate(self, instance: Any, schema_name: str) -> None:
        if schema_name not in self._validators:
            ref = {"$ref": f"urn:openai-openapi#/components/schemas/{schema_name}"}
            self._validators[schema_name] = self._cls(ref, registry=self._registry)
        errors = sorted(self._validators[schema_name].iter_errors(instance), key=lambda e: list(e.path))
        assert not errors, f"{schema_name}: " + "; ".join(
            f"{list(e.absolute_path)}: {e.message[:300]}" for e in errors[:5]
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


ROOT = pathlib.Path(__file__).resolve().parents[2]


def spawn_serve(port: int, api_key: str, *args: str) -> subprocess.Popen[bytes]:
    """A real `specgate serve` process on loopback (this checkout's code, offline), stdout and
    stderr piped; `args` are further serve flags."""
    cmd = [sys.executable, "-c", "import sys; from cli import main; sys.exit(main())", "serve",
           "--port", str(port), "--api-key", api_key, *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_healthy(base: str, proc: subprocess.Popen[bytes], *, timeout: float, poll_s: float) -> None:
    """Poll `/health` until 200; RuntimeError (with the server's stderr tail) if it exits first
    or stays unhealthy past `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode()[-3000:] if proc.stderr else ''}")
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(poll_s)
    raise RuntimeError(f"server did not become healthy in {timeout:g} s")


class SpyEngine:
    """The real engine, with every `abort` call recorded (to observe cancellation)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.aborted: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def generate(self, request: Any) -> Any:
        return self._inner.generate(request)

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)
        await self._inner.abort(request_id)


@dataclass
class RunningServer:
    base_url: str
    app: Any
    engine: SpyEngine
    server: Any

    @property
    def v1(self) -> str:
        return self.base_url + "/v1"


def start_server(app: Any, engine: SpyEngine) -> Iterator[RunningServer]:
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.05)
    try:
        yield RunningServer(f"http://127.0.0.1:{port}", app, engine, server)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def make_settings(**overrides: Any) -> Any:
    from gateway.settings import GatewaySettings

    # gc_freeze off: these servers run inside the test process, whose heap (every fixture and
    # engine alive at a freeze) must stay collectable; tests/gateway/test_gc_heap.py turns it on
    base: dict[str, Any] = {"api_key": API_KEY, "stats_log_interval_s": 0.5, "max_model_len": 1024,
                            "default_max_tokens": 64, "max_tokens_cap": 1000, "gc_freeze": False}
    base.update(overrides)
    return GatewaySettings(**base)
