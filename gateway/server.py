"""The HTTP server with a graceful shutdown: `GracefulServer(config, state=, deadline_s=)`, a
`uvicorn.Server` whose shutdown (SIGTERM / SIGINT) goes:

1. stop admitting: the listening sockets close (new connections are refused), idle keep-alive
   connections close, and the app answers any further request on an open connection with a
   503 `shutting_down` (Retry-After);
2. in-flight requests get `deadline_s` to finish normally;
3. past the deadline, the engine is shut down, which fails every request still in flight
   cleanly: a non-streamed one gets a 503 `engine_unavailable`, a stream gets an error event
   and `[DONE]`; a few seconds later uvicorn cancels whatever is left;
4. the app's lifespan shutdown (engine, background tasks) runs as usual.

Relies on uvicorn's `servers`, `server_state` and `_wait_tasks_to_complete` (uvicorn is
pinned). Knows nothing of request shapes.
"""

from __future__ import annotations

import asyncio
import logging
import socket

import uvicorn

from gateway.state import GatewayState

logger = logging.getLogger("specgate.gateway")

FLUSH_S = 3.0  # after the engine failed the stragglers: time for their last bytes to go out


class GracefulServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, *, state: GatewayState, deadline_s: float) -> None:
        config.timeout_graceful_shutdown = int(FLUSH_S)
        super().__init__(config)
        self.state = state
        self.deadline_s = deadline_s

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.state.draining = True
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        in_flight = len(self.server_state.tasks)
        logger.info("shutting down: %d request(s) in flight, %.0f s to finish", in_flight, self.deadline_s)
        try:
            await asyncio.wait_for(self._wait_tasks_to_complete(), timeout=self.deadline_s)
        except TimeoutError:
            left = len(self.server_state.tasks)
            logger.warning("shutdown deadline passed: failing %d request(s) still in flight", left)
            engine = self.state.bound_engine
            if engine is not None:
                await engine.shutdown()
        await super().shutdown(sockets=None)
