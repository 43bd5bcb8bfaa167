"""Building blocks for the small servers backend tests start on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web


def app_with_models() -> web.Application:
    """An app with the ``GET /v1/models`` the openai backend's preflight asks for."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    return app


def sse_lines(events: Iterable[Mapping[str, Any] | str]) -> bytes:
    """Server-sent events as OpenAI-compatible servers write them (``data: {...}`` + blank line)."""
    return b"".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events)


async def send_sse(request: web.Request, body: bytes, piece: int = 7) -> web.StreamResponse:
    """Stream ``body`` in small pieces, so lines and events arrive split across reads."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for start in range(0, len(body), piece):
        await response.write(body[start : start + piece])
    await response.write_eof()
    return response


def chat_completion(text: str = "42") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
