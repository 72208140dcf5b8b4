"""`GET /metrics`: the app's Prometheus registry in text exposition format. Exposure:
`metrics_access` (public by default, for scrapers; "api_key" or "off")."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.security import exposure

router = APIRouter(dependencies=[Depends(exposure("metrics_access"))])


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(request.app.state.gateway.metrics.render(), media_type=CONTENT_TYPE_LATEST)
