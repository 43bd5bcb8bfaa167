"""The simulator's aiohttp application: OpenAI-compatible endpoints in front of the engine."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from gymbench.sim.capacity import describe
from gymbench.sim.config import SimConfig
from gymbench.sim.endpoints import ENDPOINTS, RESPONSES, responses_request
from gymbench.sim.engine import Sequence
from gymbench.sim.openai_format import Endpoint, Reply, dumps
from gymbench.sim.request import BadRequest, ParsedRequest
from gymbench.sim.service import Admission, Refusal, SimService

HANG_POLL_S = 0.2


def error_response(
    status: int,
    message: str,
    kind: str,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status, headers=headers)


def agent_reward(expected: Any, text: str) -> float:
    """The simulated agent's own verifier: the last line against ``expected_answer``."""
    if expected is None:
        return 0.0
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return 1.0 if lines and lines[-1].casefold() == str(expected).strip().casefold() else 0.0


def retry_headers(seconds: float) -> dict[str, str]:
    return {"Retry-After": str(max(1, math.ceil(seconds))), "retry-after-ms": str(int(seconds * 1000))}


def refusal_response(refusal: Refusal) -> web.Response:
    headers = retry_headers(refusal.retry_after_s) if refusal.retry_after_s is not None else {}
    headers.update(refusal.headers)
    return error_response(
        refusal.status, refusal.message, refusal.kind, param=refusal.param, code=refusal.code, headers=headers or None
    )


class SimServer:
    """The HTTP face of one :class:`SimService`: endpoints, streaming, hangs and resets."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.service = SimService(config, time.monotonic)
        self.engine = self.service.engine
        self.metrics = self.service.metrics
        self.served = config.served_models

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)
        for endpoint in ENDPOINTS:
            app.router.add_post(endpoint.path, self._handler(endpoint))
        app.router.add_post("/run", self.run_agent)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_get("/sim/config", self.describe_config)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, app: web.Application) -> None:
        self.engine.start()

    async def _stop(self, app: web.Application) -> None:
        await self.engine.stop()

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def models(self, request: web.Request) -> web.Response:
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "gymbench-sim"} for name in self.served]
        return web.json_response({"object": "list", "data": data})

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    async def describe_config(self, request: web.Request) -> web.Response:
        capacity = describe(self.config)
        return web.json_response({"config": self.config.to_dict(), "capacity": capacity.__dict__})

    def _handler(self, endpoint: Endpoint) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self.serve(endpoint, request)

        return handle

    async def serve(self, endpoint: Endpoint, request: web.Request) -> web.StreamResponse:
        parsed = await self._parse(request, endpoint.parse)
        if isinstance(parsed, web.Response):
            return parsed
        return await self._admit(endpoint, request, parsed, lambda reply: dumps(endpoint.full(reply)))

    async def run_agent(self, request: web.Request) -> web.StreamResponse:
        """NeMo Gym's agent ``/run``: generate for the row's request, verify, return the row with
        ``response`` and ``reward`` added, as NeMo Gym's simple agent does."""
        rows: list[dict[str, Any]] = []

        def parse(body: dict[str, Any]) -> ParsedRequest:
            params = body.get("responses_create_params")
            if not isinstance(params, dict):
                raise BadRequest(
                    "missing required field 'responses_create_params' (an object)", "responses_create_params"
                )
            rows.append(body)
            return responses_request(self.config.model, params)

        parsed = await self._parse(request, parse)
        if isinstance(parsed, web.Response):
            return parsed

        def render(reply: Reply) -> bytes:
            row = rows[0]
            reward = agent_reward(row.get("expected_answer"), reply.output.text)
            return dumps({**row, "response": RESPONSES.full(reply), "reward": reward})

        return await self._admit(RESPONSES, request, parsed, render)

    async def _parse(self, request: web.Request, parse: Any) -> ParsedRequest | web.Response:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            return refusal_response(self.service.bad_request(f"malformed JSON body: {exc}"))
        try:
            return self.service.parse(parse, body)
        except Refusal as refusal:
            return refusal_response(refusal)

    async def _admit(
        self, endpoint: Endpoint, request: web.Request, parsed: ParsedRequest, render: Callable[[Reply], bytes]
    ) -> web.StreamResponse:
        """Rate limits and faults, then generation."""
        try:
            admission = self.service.admit(parsed)
        except Refusal as refusal:
            return refusal_response(refusal)
        if admission.fault == "hang":
            return await self._hang(request)
        return await self._generate(endpoint, request, parsed, admission, render)

    async def _hang(self, request: web.Request) -> web.Response:
        """Never answer; return only once the client has given up and closed the connection."""
        while request.transport is not None and not request.transport.is_closing():
            await asyncio.sleep(HANG_POLL_S)
        return web.Response(status=499)

    async def _generate(
        self,
        endpoint: Endpoint,
        request: web.Request,
        parsed: ParsedRequest,
        admission: Admission,
        render: Callable[[Reply], bytes],
    ) -> web.StreamResponse:
        tokens: asyncio.Queue[tuple[int, int]] | None = asyncio.Queue() if parsed.stream else None
        on_token = (lambda choice, index: tokens.put_nowait((choice, index))) if tokens is not None else None
        try:
            reply, seqs = self.service.submit(parsed, admission, endpoint.prefix, on_token)
        except Refusal as refusal:
            return refusal_response(refusal)
        reset = admission.fault == "reset"
        if tokens is not None:
            return await self._stream(endpoint, request, reply, seqs, tokens, reset)
        await self.service.finish(seqs)
        self.service.succeeded(reply)
        payload = render(reply)
        if reset:
            return await self._reset_midway(request, payload, "application/json")
        return web.Response(body=payload, content_type="application/json")

    async def _stream(
        self,
        endpoint: Endpoint,
        request: web.Request,
        reply: Reply,
        seqs: list[Sequence],
        tokens: asyncio.Queue[tuple[int, int]],
        reset: bool,
    ) -> web.StreamResponse:
        """Each token as the engine makes it, choices interleaved as their sequences step."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        streamer = endpoint.streamer(reply)
        total = reply.completion_tokens
        try:
            await response.write(streamer.start())
            for sent in range(1, total + 1):
                choice, index = await tokens.get()
                await response.write(streamer.token(choice, index))
                if reset and sent >= max(1, total // 2):
                    self._abort(request)
                    return response
            await response.write(streamer.end())
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.service.cancel(seqs)
            raise
        self.service.succeeded(reply)
        return response

    async def _reset_midway(self, request: web.Request, payload: bytes, content_type: str) -> web.StreamResponse:
        """Send the headers and half the body, then drop the connection, as a crashing proxy would."""
        response = web.StreamResponse(headers={"Content-Type": content_type})
        response.content_length = len(payload)
        await response.prepare(request)
        await response.write(payload[: len(payload) // 2])
        self._abort(request)
        return response

    @staticmethod
    def _abort(request: web.Request) -> None:
        if request.transport is not None:
            request.transport.abort()
