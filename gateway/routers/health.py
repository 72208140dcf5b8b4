"""`GET /health`: 200 `{"status": "ok", "model": ...}` once the engine is up, 503 before.
Unauthenticated (for load balancers)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from gateway.state import get_state

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> dict[str, Any]:
    state = get_state(request)
    return {"status": "ok", "model": state.model_id}
