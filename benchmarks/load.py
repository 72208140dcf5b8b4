"""A bounded load test of a running specgate (or any OpenAI-compatible) server over HTTP.

    python -m benchmarks.load --base-url http://127.0.0.1:8000 --api-key KEY \\
        --clients 16 --requests 64 --drop 0.15 --max-tokens 48 [--server-pid PID] [--seed 0]

N concurrent clients issue `requests` streaming chat requests in all, mixing JSON-schema,
tool-call and free-text requests (chosen by a seeded RNG); a `drop` fraction of them hang up
after a few chunks. Every request ends in exactly one outcome: `completed` (a finish_reason,
then `[DONE]`), `error` (an HTTP 4xx/5xx or an in-band error event, with its code), `dropped`
(by design), or `lost` (anything else: a cut stream, a missing finish, a timeout). `duplicated`
counts streams with more than one finish per choice or a response id seen twice. Reports
requests/s, completion tokens/s, p50/p99 latency and time to first token of the completed ones, and (with
`--server-pid`) the RSS of the server and its child processes (vLLM's EngineCore) at baseline, peak (sampled every 0.2 s) and after.
`run_load(...)` returns the same figures as a `LoadReport` for tests. Knows nothing of specgate's
internals: HTTP only.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}}, "required": ["city"]}}}]


@dataclass
class LoadReport:
    requests: int = 0
    completed: int = 0
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    dropped: int = 0
    lost: int = 0
    duplicated: int = 0
    wall_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    ttfts_s: list[float] = field(default_factory=list)
    kinds: collections.Counter[str] = field(default_factory=collections.Counter)
    rss_mb: dict[str, float] = field(default_factory=dict)
    completion_tokens: int = 0  # over the completed requests (their usage chunks)

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s if self.wall_s else 0.0

    def percentile(self, values: list[float], q: float) -> float:
        if not values:
            return float("nan")
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def requests_per_s(self) -> float:
        return self.completed / self.wall_s if self.wall_s else 0.0

    def summary(self) -> str:
        pct = self.percentile

        rss = " ".join(f"{k} {v:.0f} MB" for k, v in self.rss_mb.items())
        return (f"{self.requests} requests ({dict(self.kinds)}) in {self.wall_s:.1f} s: completed {self.completed}, "
                f"errors {dict(self.errors)}, dropped by design {self.dropped}, lost {self.lost}, duplicated "
                f"{self.duplicated}; {self.requests_per_s:.2f} req/s, {self.tokens_per_s:.2f} tokens/s; latency p50 {pct(self.latencies_s, 0.5):.2f} s "
                f"p99 {pct(self.latencies_s, 0.99):.2f} s; TTFT p50 {pct(self.ttfts_s, 0.5):.2f} s p99 "
                f"{pct(self.ttfts_s, 0.99):.2f} s" + (f"; server RSS {rss}" if rss else ""))


def _body(kind: str, model: str, i: int, max_tokens: int, temperature: float = 0.7) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": True, "seed": i,
                            "temperature": temperature, "stream_options": {"include_usage": True}}
    if kind == "json":
        body["messages"] = [{"role": "user", "content": f"Invent a person #{i} as JSON."}]
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
    elif kind == "tools":
        body["messages"] = [{"role": "user", "content": f"What is the weather in city number {i}?"}]
        body["tools"] = TOOLS
        body["tool_choice"] = "required"
    else:
        body["messages"] = [{"role": "user", "content": f"Write a short line about the number {i}."}]
    return body


async def _one(client: Any, url: str, body: dict[str, Any], drop_after: int | None, report: LoadReport,
               seen_ids: set[str], timeout_s: float) -> None:
    started = time.perf_counter()
    first: float | None = None
    finishes: collections.Counter[int] = collections.Counter()
    events = 0
    tokens = 0
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", url, json=body) as r:
                if r.status_code != 200:
                    data = json.loads(await r.aread())
                    report.errors[f"{r.status_code} {data.get('error', {}).get('code')}"] += 1
                    return
                done = False
                async for line in r.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    payload = line[6:]
                    if payload == "[DONE]":
                        done = True
                        break
                    event = json.loads(payload)
                    events += 1
                    if "error" in event:
                        report.errors[f"in-band {event['error'].get('code')}"] += 1
                        return
                    if event.get("usage"):
                        tokens = int(event["usage"].get("completion_tokens", 0))
                    if events == 1:
                        if event["id"] in seen_ids:
                            report.duplicated += 1
                        seen_ids.add(event["id"])
                    for choice in event.get("choices", []):
                        delta = choice.get("delta", {})
                        if first is None and (delta.get("content") or delta.get("tool_calls")):
                            first = time.perf_counter() - started
                        if choice.get("finish_reason"):
                            finishes[choice["index"]] += 1
                    if drop_after is not None and events >= drop_after:
                        report.dropped += 1
                        return
                if drop_after is not None and not finishes:
                    report.dropped += 1  # it finished before the client could hang up
                    return
                if not done or not finishes:
                    report.lost += 1
                    return
                if any(c > 1 for c in finishes.values()):
                    report.duplicated += 1
                report.completed += 1
                report.completion_tokens += tokens
                report.latencies_s.append(time.perf_counter() - started)
                if first is not None:
                    report.ttfts_s.append(first)
    except TimeoutError:
        report.lost += 1
    except Exception as exc:  # noqa: BLE001 - a transport failure of an accepted request is a loss
        report.errors[f"transport {type(exc).__name__}"] += 1


def _rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return float(total) / 2**20


async def run_load(base_url: str, *, api_key: str | None = None, model: str | None = None, clients: int = 8,
                   requests: int = 32, drop: float = 0.1, max_tokens: int = 32, seed: int = 0,
                   timeout_s: float = 300.0, server_pid: int | None = None,
                   kinds: tuple[str, ...] = ("json", "tools", "text"), temperature: float = 0.7) -> LoadReport:
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    rng = random.Random(seed)
    report = LoadReport(requests=requests)
    seen: set[str] = set()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout_s, limits=limits) as client:
        if model is None:
            model = str((await client.get("/v1/models")).json()["data"][0]["id"])
        plan = []
        for i in range(requests):
            kind = kinds[rng.randrange(len(kinds))]
            report.kinds[kind] += 1
            plan.append((_body(kind, model, i, max_tokens, temperature), rng.randint(2, 5) if rng.random() < drop else None))
        queue: asyncio.Queue[tuple[dict[str, Any], int | None]] = asyncio.Queue()
        for item in plan:
            queue.put_nowait(item)
        baseline = _rss_mb(server_pid)
        peak = baseline or 0.0
        stop = asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, _rss_mb(server_pid) or 0.0)
                await asyncio.sleep(0.2)

        async def worker() -> None:
            while not queue.empty():
                body, drop_after = queue.get_nowait()
                await _one(client, "/v1/chat/completions", body, drop_after, report, seen, timeout_s)

        sampler = asyncio.create_task(sample()) if server_pid is not None else None
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        report.wall_s = time.perf_counter() - started
        stop.set()
        if sampler is not None:
            await sampler
        if baseline is not None:
            await asyncio.sleep(1.0)
            report.rss_mb = {"baseline": baseline, "peak": peak, "after": _rss_mb(server_pid) or 0.0}
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--api-key", default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--drop", type=float, default=0.15, help="fraction of clients that hang up mid-stream")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=600.0, help="per-request limit (a request past it is lost)")
    p.add_argument("--server-pid", type=int, default=None, help="sample this process's RSS")
    args = p.parse_args(argv)
    report = asyncio.run(run_load(args.base_url, api_key=args.api_key, model=args.model, clients=args.clients,
                                  requests=args.requests, drop=args.drop, max_tokens=args.max_tokens,
                                  seed=args.seed, timeout_s=args.timeout_s, server_pid=args.server_pid))
    print(report.summary())
    return 0 if report.lost == 0 and report.duplicated == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
