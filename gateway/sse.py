"""Server-sent events framing for OpenAI streams: `data: <json>\\n\\n` per chunk and a final
`data: [DONE]\\n\\n`. Knows nothing of chunk contents."""

from __future__ import annotations

import json
from typing import Any

DONE = "data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"
