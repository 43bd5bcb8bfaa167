"""The ``openai`` backend: any OpenAI-compatible server (vLLM, SGLang, the OpenAI API).

Requests go through the shared :class:`~gymbench.builtin.http_client.RetryingClient` (one pooled
session, finite timeouts, bounded retries). The API key is read from the environment variable
the configuration names and is never stored anywhere else.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import aiohttp
import orjson

from gymbench.builtin.http_client import RetryingClient
from gymbench.builtin.openai_shapes import chat_body, read_chat, read_responses
from gymbench.errors import GymbenchError
from gymbench.types import Generation, GenerationFailed, GenerationRequest, TokenUsage

APIS = {"responses": "/responses", "chat": "/chat/completions"}


class OpenAIBackend:
    def __init__(self, settings: Mapping[str, Any]) -> None:
        base_url, model = settings.get("base_url"), settings.get("model")
        api = settings.get("api") or "responses"
        if not base_url:
            raise GymbenchError("the openai backend needs +base_url=http://HOST:PORT/v1")
        if not model:
            raise GymbenchError("the openai backend needs +model=NAME (the served model's name)")
        if api not in APIS:
            raise GymbenchError(f"api must be one of {', '.join(APIS)}, got {api!r}")
        self.url = str(base_url).rstrip("/") + APIS[api]
        self.models_url = str(base_url).rstrip("/") + "/models"
        self.api = api
        self.model = model
        self.stream = bool(settings.get("stream", False))
        self.extra_body = dict(settings.get("extra_body") or {})
        self.client = RetryingClient(settings, "model server")

    async def __aenter__(self) -> OpenAIBackend:
        await self.client.open(self.models_url)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.client.close()

    def request_body(self, params: Mapping[str, Any]) -> dict[str, Any]:
        body = dict(params) if self.api == "responses" else chat_body(params)
        body["model"] = self.model
        if self.stream:
            body["stream"] = True
            if self.api == "chat":
                body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body)
        return body

    async def generate(self, request: GenerationRequest) -> Generation:
        body = orjson.dumps(self.request_body(request.params))
        posted = await self.client.post(self.url, body, self._read)
        generation: Generation = posted.value
        timings = {**generation.timings, "connection_wait": posted.connection_wait}
        return Generation(generation.text, generation.response, generation.usage, timings, retries=posted.retries)

    async def _read(self, answer: aiohttp.ClientResponse, started: float) -> Generation:
        if self.stream:
            return await self._read_stream(answer, started)
        try:
            data = orjson.loads(await answer.read())
        except ValueError as exc:
            raise GenerationFailed("invalid_response", f"response is not JSON: {exc}") from None
        text, usage = read_responses(data) if self.api == "responses" else read_chat(data)
        return Generation(text, data, usage, {"generation": time.perf_counter() - started})

    async def _read_stream(self, answer: aiohttp.ClientResponse, started: float) -> Generation:
        """Read server-sent events; time to first token and the gaps between tokens."""
        pieces: list[str] = []
        stamps: list[float] = []
        final: dict[str, Any] = {}
        usage = TokenUsage()
        async for raw in answer.content:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            try:
                event = orjson.loads(payload)
            except ValueError:
                raise GenerationFailed("invalid_response", f"bad stream event: {payload[:200]!r}") from None
            delta, event_usage, event_final = _stream_event(event, self.api)
            if delta:
                pieces.append(delta)
                stamps.append(time.perf_counter())
            if event_usage is not None:
                usage = event_usage
            if event_final:
                final = event_final
        timings: dict[str, float] = {"generation": time.perf_counter() - (stamps[0] if stamps else started)}
        if stamps:
            timings["ttft"] = stamps[0] - started
            if len(stamps) > 1:
                timings["inter_token"] = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
        return Generation("".join(pieces), final or {"streamed": True}, usage, timings)


def _stream_event(event: Mapping[str, Any], api: str) -> tuple[str, TokenUsage | None, dict[str, Any]]:
    """(text delta, usage if the event carries it, final response if it is the last event)."""
    if api == "chat":
        choices = event.get("choices") or []
        delta = (choices[0].get("delta") or {}).get("content") or "" if choices else ""
        usage = event.get("usage")
        counted = TokenUsage(usage["prompt_tokens"], usage["completion_tokens"]) if usage else None
        return delta, counted, {}
    kind = event.get("type", "")
    if kind == "response.output_text.delta":
        return event.get("delta", ""), None, {}
    if kind in ("response.completed", "response.incomplete", "response.failed"):
        response = event.get("response") or {}
        usage = response.get("usage") or {}
        counted = TokenUsage(usage.get("input_tokens", 0), usage.get("output_tokens", 0))
        return "", counted, dict(response)
    return "", None, {}
