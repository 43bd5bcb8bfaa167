"""A loopback server that answers as llama.cpp's ``llama-server`` does, with timings a test chooses.

Where llama.cpp puts its per-request ``timings`` (tools/server/server-task.cpp): on a non-streamed
chat completion at the top level; on a streamed chat completion on the last chunk (the usage chunk
when ``stream_options.include_usage`` is set, else the chunk with ``finish_reason``); on a streamed
Responses API answer in the ``response.completed`` event, beside ``response``; a non-streamed
Responses API answer has none. ``timings=None`` makes a server that reports none (vLLM, SGLang).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.builtin.loopback import app_with_models, send_sse, sse_lines

TOKENS = ("The", " answer", " is", " 42")


def llama_timings(prompt_ms: float = 12.5, predicted_per_token_ms: float = 4.0, prompt_n: int = 9) -> dict[str, Any]:
    """A ``timings`` object with every field llama.cpp writes, consistent with :data:`TOKENS`."""
    predicted_n = len(TOKENS)
    predicted_ms = predicted_per_token_ms * (predicted_n - 1)
    return {
        "cache_n": 0,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n,
        "prompt_per_second": 1e3 * prompt_n / prompt_ms if prompt_ms else 0.0,
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_per_token_ms,
        "predicted_per_second": 1e3 * (predicted_n - 1) / predicted_ms,
    }


@dataclass
class FakeLlama:
    timings: dict[str, Any] | None = field(default_factory=llama_timings)
    first_byte_delay_s: float = 0.0
    """How long the server waits before it answers at all (a queue the server does not count)."""

    def app(self) -> web.Application:
        app = app_with_models()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/responses", self.responses)
        return app

    def usage(self) -> dict[str, int]:
        return {"prompt_tokens": 9, "completion_tokens": len(TOKENS), "total_tokens": 9 + len(TOKENS)}

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        await asyncio.sleep(self.first_byte_delay_s)
        head = {"id": "chatcmpl-1", "created": 1, "model": "m", "system_fingerprint": "b1"}
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(TOKENS)}
            answer = {**head, "object": "chat.completion", "usage": self.usage(),
                      "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}  # fmt: skip
            return web.json_response(self._with_timings(answer))
        chunk = {**head, "object": "chat.completion.chunk"}
        deltas = [{"role": "assistant", "content": None}, *({"content": token} for token in TOKENS)]
        events: list[dict[str, Any]] = [
            {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas
        ]
        events.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({**chunk, "choices": [], "usage": self.usage()})
        events[-1] = self._with_timings(events[-1])
        return await send_sse(request, sse_lines([*events, "[DONE]"]))

    async def responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        await asyncio.sleep(self.first_byte_delay_s)
        text = "".join(TOKENS)
        content = [{"type": "output_text", "annotations": [], "text": text}]
        output = [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": content}]
        usage = {"input_tokens": 9, "output_tokens": len(TOKENS), "total_tokens": 9 + len(TOKENS)}
        response = {"id": "resp_1", "object": "response", "status": "completed", "model": "m", "output": output,
                    "usage": usage}  # fmt: skip
        if not body.get("stream"):
            return web.json_response(response)
        started = {"id": "resp_1", "object": "response", "status": "in_progress"}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": started},
            {"type": "response.in_progress", "response": started},
            *({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0,
               "delta": token} for token in TOKENS),
            self._with_timings({"type": "response.completed", "response": response}),
        ]  # fmt: skip
        return await send_sse(request, sse_lines([*events, "[DONE]"]))

    def _with_timings(self, answer: dict[str, Any]) -> dict[str, Any]:
        return answer if self.timings is None else {**answer, "timings": self.timings}
