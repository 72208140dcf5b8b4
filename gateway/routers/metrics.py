"""`GET /metrics`: the app's Prometheus registry in text exposition format. Unauthenticated
(scrapers), like `/health`."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

router = APIRouter()


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(request.app.state.gateway.metrics.render(), media_type=CONTENT_TYPE_LATEST)
