"""`GET /health`: 200 `{"status": "ok", "model": ...}` while the engine serves; 503 in OpenAI's
envelope with Retry-After while it starts and once it is dead or shut down (code
`engine_starting` / `engine_unavailable`, naming why). Exposure: `health_access` (public by
default, for load balancers; "api_key" or "off")."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from gateway.security import exposure
from gateway.state import get_state

router = APIRouter(dependencies=[Depends(exposure("health_access"))])


@router.get("/health")
async def health(request: Request) -> dict[str, Any]:
    state = get_state(request)
    return {"status": "ok", "model": state.model_id}
