"""`GET /v1/models` and `GET /v1/models/{model}`: the one model this server serves
(404 `model_not_found` for any other id)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from gateway.protocol.responses import model_card
from gateway.security import require_api_key
from gateway.state import get_state

router = APIRouter(dependencies=[Depends(require_api_key)])


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    state = get_state(request)
    return {"object": "list", "data": [model_card(state.model_id, created=state.created, root=state.settings.model)]}


@router.get("/v1/models/{model:path}")
async def get_model(model: str, request: Request) -> dict[str, Any]:
    state = get_state(request)
    state.check_model(model)
    return model_card(state.model_id, created=state.created, root=state.settings.model)
