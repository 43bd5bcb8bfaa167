"""The ``openai`` backend: any OpenAI-compatible server (vLLM, SGLang, the OpenAI API).

Requests go through the shared :class:`~gymbench.builtin.http_client.RetryingClient` (one pooled
session, finite timeouts, bounded retries). The API key is read from the environment variable
the configuration names and is never stored anywhere else.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import aiohttp
import orjson

from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.http_client import RequestClock, RetryingClient
from gymbench.builtin.openai_shapes import chat_body, read_chat, read_responses, read_server_timings
from gymbench.builtin.routing import reach_replicas, replica_router
from gymbench.builtin.stream_assembly import ChatStream, ResponsesStream, StreamAssembler, sse_event_batches
from gymbench.errors import GymbenchError
from gymbench.replica_figures import RoutingCounts
from gymbench.types import Generation, GenerationFailed, GenerationRequest, JSONObject, ServerTimings, TokenUsage

APIS = {"responses": "/responses", "chat": "/chat/completions"}
MODEL_NOT_FOUND = re.compile(
    r"(?i)model_not_found|\bmodel\b.{0,120}?\b(does not exist|not found|unknown|not (available|served|loaded))"
)
"""A 404 that says the model is unknown (OpenAI's ``model_not_found``, vLLM's "The model `x` does
not exist", Ollama's "model "x" not found") is not about a missing endpoint."""


class OpenAIBackend:
    def __init__(self, settings: OpenAISettings) -> None:
        """``settings`` checked (built through the plugin manager or the schema); the server and the
        model are required here, when the simulator standing in has laid in its address."""
        base_urls = settings.endpoints()
        if not settings.model:
            raise GymbenchError("the openai backend needs +model=NAME (the served model's name)")
        self.url = base_urls[0] + APIS[settings.api]
        self.models_url = base_urls[0] + "/models"
        self.router = replica_router(base_urls, APIS[settings.api], settings.routing)
        """Several replicas: which one each try goes to, and what each did; None for one server."""
        self.api = settings.api
        self.model = settings.model
        self.stream = settings.stream
        self.extra_body = dict(settings.extra_body)
        self.client = RetryingClient(settings, "model server")

    async def __aenter__(self) -> OpenAIBackend:
        if self.router is None:
            await self.client.open(self.models_url)
            return self
        await self.client.open(None)
        try:
            if self.client.preflight:
                await reach_replicas(self.client, self.router)
        except BaseException:
            await self.client.close()
            raise
        return self

    def replica_counts(self) -> RoutingCounts | None:
        return self.router.counts() if self.router is not None else None

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.client.close()

    def request_body(self, params: Mapping[str, Any]) -> JSONObject:
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
        posted = await self.client.post(self.url, body, self._read, self._explain, self.router, request)
        answer: _Answer = posted.value
        timings = answer.timings  # the reader's own dict: the pool wait joins it, nothing is copied
        timings["connection_wait"] = posted.connection_wait
        return Generation(
            answer.text,
            answer.response,
            answer.usage,
            timings,
            retries=posted.retries,
            server_timings=answer.server_timings,
            client_delay=posted.client_delay,
        )

    def _explain(self, status: int, text: str) -> str | None:
        """What to do about a 404, whose two usual causes need different fixes."""
        if status != 404:
            return None
        if MODEL_NOT_FOUND.search(text):
            return f"the server serves no model named {self.model!r}: check +model (GET {self.models_url} lists them)"
        if self.api == "responses":
            path = urlsplit(self.url).path
            return f"the server has no {path} endpoint (many servers only speak chat completions): add +api=chat"
        return None

    async def _read(self, answer: aiohttp.ClientResponse, clock: RequestClock) -> _Answer:
        if self.stream and answer.content_type != "application/json":  # a server may ignore stream=true
            return await self._read_stream(answer, clock)
        received = await answer.read()
        elapsed = {"generation": clock.stamp() - clock.sent}
        try:
            data = orjson.loads(received)
        except ValueError as exc:
            raise GenerationFailed("invalid_response", f"response is not JSON: {exc}") from None
        text, usage = read_responses(data) if self.api == "responses" else read_chat(data)
        reported = data.get("timings")  # a dict: the reader above refused anything else
        return _Answer(text, data, usage, elapsed, read_server_timings(reported) if reported is not None else None)

    async def _read_stream(self, answer: aiohttp.ClientResponse, clock: RequestClock) -> _Answer:
        """Assemble the streamed answer into the non-streamed shape; time the generated tokens.

        llama.cpp puts its ``timings`` on the last event (the usage chunk of a chat stream, the
        ``response.completed`` event of a Responses stream; with ``timings_per_token`` on every
        event, each a running total), so the last event's are the request's."""
        stream: StreamAssembler = ChatStream() if self.api == "chat" else ResponsesStream()
        stamps: list[float] = []
        server_timings = None
        add, stamp = stream.add, clock.stamp
        async for events in sse_event_batches(answer.content):
            for event in events:
                if add(event):
                    stamps.append(stamp())
                if "timings" in event:
                    server_timings = event["timings"]
        response, usage = stream.response(), stream.usage()
        timings = _stream_timings(clock.sent, stamps)
        return _Answer(stream.text, response, usage, timings, read_server_timings(server_timings))


class _Answer(NamedTuple):
    """What a reader made of a 200 answer; :meth:`OpenAIBackend.generate` adds the request's
    retries, pool wait and client delay and builds the one :class:`Generation` (building it
    twice, or ``dataclasses.replace``, cost a measurable share of the client's CPU per rollout)."""

    text: str
    response: JSONObject
    usage: TokenUsage
    timings: dict[str, float]
    server_timings: ServerTimings | None


def _stream_timings(started: float, stamps: list[float]) -> dict[str, float]:
    """Time to first token, the mean gap between tokens, and generation from the first token."""
    timings = {"generation": time.perf_counter() - (stamps[0] if stamps else started)}
    if stamps:
        timings["ttft"] = stamps[0] - started
        if len(stamps) > 1:
            timings["inter_token"] = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
            timings["second_token"] = stamps[1] - started
    return timings
