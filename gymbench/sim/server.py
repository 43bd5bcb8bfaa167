"""The simulator's aiohttp application: OpenAI-compatible endpoints in front of the engine."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

from aiohttp import web

from gymbench.sim.capacity import describe
from gymbench.sim.config import SimConfig
from gymbench.sim.engine import Sequence
from gymbench.sim.openai_format import ENDPOINTS, RESPONSES, BadRequest, ParsedRequest, Reply
from gymbench.sim.service import Admission, Refusal, SimService, responses_request

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
        model = {"id": self.config.model, "object": "model", "created": 0, "owned_by": "gymbench-sim"}
        return web.json_response({"object": "list", "data": [model]})

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    async def describe_config(self, request: web.Request) -> web.Response:
        capacity = describe(self.config)
        return web.json_response({"config": self.config.to_dict(), "capacity": capacity.__dict__})

    def _handler(self, endpoint: Any) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self.serve(endpoint, request)

        return handle

    async def serve(self, endpoint: Any, request: web.Request) -> web.StreamResponse:
        parsed = await self._parse(request, endpoint.parse)
        if isinstance(parsed, web.Response):
            return parsed
        return await self._admit(endpoint, request, parsed, lambda reply: json.dumps(endpoint.full(reply)).encode())

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
            return json.dumps({**row, "response": RESPONSES.full(reply), "reward": reward}).encode()

        return await self._admit(RESPONSES, request, parsed, render)

    async def _parse(self, request: web.Request, parse: Any) -> ParsedRequest | web.Response:
        try:
            body = json.loads(await request.read())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return refusal_response(self.service.bad_request(f"malformed JSON body: {exc}"))
        try:
            return self.service.parse(parse, body)
        except Refusal as refusal:
            return refusal_response(refusal)

    async def _admit(
        self, endpoint: Any, request: web.Request, parsed: ParsedRequest, render: Any
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
        endpoint: Any,
        request: web.Request,
        parsed: ParsedRequest,
        admission: Admission,
        render: Any,
    ) -> web.StreamResponse:
        tokens: asyncio.Queue[int] | None = asyncio.Queue() if parsed.stream else None
        try:
            reply, seq = self.service.submit(parsed, admission, endpoint.prefix, tokens.put_nowait if tokens else None)
        except Refusal as refusal:
            return refusal_response(refusal)
        reset = admission.fault == "reset"
        if tokens is not None:
            return await self._stream(endpoint, request, reply, seq, tokens, parsed.include_usage, reset)
        await self.service.finish(seq)
        self.service.succeeded(reply)
        payload = render(reply)
        if reset:
            return await self._reset_midway(request, payload, "application/json")
        return web.Response(body=payload, content_type="application/json")

    async def _stream(
        self,
        endpoint: Any,
        request: web.Request,
        reply: Reply,
        seq: Sequence,
        tokens: asyncio.Queue[int],
        include_usage: bool,
        reset: bool,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        total = len(reply.output.tokens)
        try:
            await response.write(endpoint.stream_start(reply))
            for _ in range(total):
                index = await tokens.get()
                await response.write(endpoint.stream_delta(reply, index))
                if reset and index + 1 >= max(1, total // 2):
                    self._abort(request)
                    return response
            await response.write(endpoint.stream_end(reply, include_usage))
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.engine.cancel(seq)
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
