"""`GET /v1/models` and `GET /v1/models/{model}`: the one model this server serves
(404 `model_not_found` for any other id)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from gateway.protocol.responses import model_card
from gateway.security import require_api_key
from gateway.state import get_state

router = APIRouter(dependencies=[Depends(require_api_key)])


def _weights(request: Request) -> dict[str, str] | None:
    """Kernels and weight format of a bound engine (None while it starts)."""
    engine = get_state(request).bound_engine
    if engine is None:
        return None
    kernels, dtype = engine.kernels, engine.dtype
    note = ("Q4_K_M GGUF weights (the checkpoint the bf16 model is dequantized from) on llama.cpp kernels"
            if kernels == "llama-cpp" else f"{dtype} weights on {kernels} kernels")
    return {"kernels": kernels, "dtype": dtype, "note": note}


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    state = get_state(request)
    card = model_card(state.model_id, created=state.created, root=state.settings.model, weights=_weights(request))
    return {"object": "list", "data": [card]}


@router.get("/v1/models/{model:path}")
async def get_model(model: str, request: Request) -> dict[str, Any]:
    state = get_state(request)
    state.check_model(model)
    return model_card(state.model_id, created=state.created, root=state.settings.model, weights=_weights(request))
