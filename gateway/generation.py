"""Running engine generations for one HTTP request: n choices, abort on cancel, and merging
their streams.

`ChoiceRun` drives one `engine.generate(request)`; whatever ends its iteration early
(client disconnect → task cancellation, an error in a sibling choice) calls
`engine.abort(request_id)`, so a vanished client never keeps the engine busy.
`collect()` runs all choices to the end (watching for a client disconnect), `merged()`
interleaves their deltas as `(choice_index, delta)`. Knows the engine's `generate`/`abort`
and `TokenDelta` only; nothing of HTTP bodies or the OpenAI shapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from engine import Engine, GenerationRequest, RequestStats, TokenDelta


@dataclass
class ChoiceResult:
    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str = "stop"
    stats: RequestStats | None = None
    first_token_s: float | None = None


class ChoiceRun:
    """One generation; iterate `deltas()` once."""

    def __init__(self, engine: Engine, request: GenerationRequest, *, index: int, started: float) -> None:
        self.engine = engine
        self.request = request
        self.index = index
        self.result = ChoiceResult(index=index)
        self._started = started
        self.finished = False

    async def deltas(self) -> AsyncIterator[TokenDelta]:
        gen = self.engine.generate(self.request)
        try:
            async for delta in gen:
                if delta.token_ids and self.result.first_token_s is None:
                    self.result.first_token_s = time.perf_counter() - self._started
                self.result.text += delta.text
                self.result.token_ids.extend(delta.token_ids)
                if delta.finish_reason is not None:
                    self.result.finish_reason = delta.finish_reason
                    self.result.stats = delta.stats
                    self.finished = True
                yield delta
        finally:
            if not self.finished:
                with contextlib.suppress(Exception):
                    await gen.aclose()
                with contextlib.suppress(Exception):
                    await self.engine.abort(self.request.request_id)


async def _drain(run: ChoiceRun) -> ChoiceResult:
    async for _ in run.deltas():
        pass
    return run.result


async def collect(
    runs: list[ChoiceRun], *, is_disconnected: Callable[[], Awaitable[bool]] | None = None, poll_s: float = 0.25
) -> list[ChoiceResult]:
    """Run every choice to its end; cancel them all if the client goes away (→ CancelledError)."""
    tasks = [asyncio.create_task(_drain(run)) for run in runs]
    try:
        if is_disconnected is None:
            return list(await asyncio.gather(*tasks))
        pending: set[asyncio.Task[ChoiceResult]] = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, timeout=poll_s, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                if task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            if pending and await is_disconnected():
                raise asyncio.CancelledError("client disconnected")
        return [task.result() for task in tasks]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


_DONE = object()


async def merged(runs: list[ChoiceRun]) -> AsyncIterator[tuple[int, TokenDelta]]:
    """Interleave the choices' deltas as they arrive; cancelling the consumer aborts all."""
    if len(runs) == 1:
        only = runs[0].deltas()
        try:
            async for delta in only:
                yield 0, delta
        finally:
            await only.aclose()  # type: ignore[attr-defined]
        return
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def pump(run: ChoiceRun) -> None:
        try:
            async for delta in run.deltas():
                await queue.put((run.index, delta))
        except BaseException as exc:  # forwarded to the consumer
            await queue.put(exc)
            raise
        finally:
            await queue.put(_DONE)

    tasks = [asyncio.create_task(pump(run)) for run in runs]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is _DONE:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
