"""A backend served by the simulator's engine on the caller's own event loop: no HTTP, no process.

Each request goes through the same :class:`~gymbench.sim.service.SimService` as the HTTP server's
(rate limits, faults, planned answers, ``max_waiting`` 429s, the KV cache, collapse, metrics), so
on a :class:`~gymbench.sim.virtual.VirtualTimeLoop` the tuner and the collector meet the engine
they meet over HTTP, minus the client's CPU and the network, and every run repeats exactly.

One backend is one server's life on one loop: the engine runs while the backend is entered, and
its queues, rate-limit buckets, answer counters, warm-up and metrics carry over from one
``async with`` to the next (a tuner opens it once per probe).

Failures are those of the HTTP client: a 429 (queue full or rate limit) is ``rate_limited``, a
simulated 500 ``server_error``, a request longer than ``timeout_s`` (a simulated hang, say)
``timeout``, a simulated reset ``connection_error`` (after the engine did the work, as a reset
mid-response does). A failed attempt is repeated up to ``max_retries`` times, as the HTTP client
does, waiting what the server's Retry-After asks, else ``backoff_s · 2**retry``, without jitter
so that runs repeat exactly; the default of no retries shows every refusal as a failure.
Requests are NeMo Gym rows' ``responses_create_params`` (the Responses API), answered whole,
to the configured model whatever the row names (as the HTTP backends send their own ``model``).
Timings are those a streaming client measures: ``ttft`` to the first token, then ``generation``
from it to the last, so that their sum is the request's latency, as it is over HTTP.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from gymbench.sim.config import SimConfig
from gymbench.sim.endpoints import RESPONSES, responses_request
from gymbench.sim.openai_format import Reply
from gymbench.sim.service import Refusal, SimService
from gymbench.types import Generation, GenerationFailed, GenerationRequest, TokenUsage

DEFAULT_TIMEOUT_S = 300.0
"""The HTTP client's default ``request_timeout_s``."""


class _AttemptFailed(Exception):
    def __init__(self, kind: str, reason: str, status: int | None = None, wait_s: float | None = None) -> None:
        super().__init__(reason)
        self.failure = GenerationFailed(kind, reason, status)
        self.retryable = status is None or status == 429 or status >= 500
        self.wait_s = wait_s


def _refused(refusal: Refusal) -> _AttemptFailed:
    kinds = {429: "rate_limited", 400: "bad_request"}
    kind = "server_error" if refusal.status >= 500 else kinds.get(refusal.status, "http_error")
    return _AttemptFailed(kind, f"HTTP {refusal.status}: {refusal.message}", refusal.status, refusal.retry_after_s)


class InProcessBackend:
    """A :class:`~gymbench.types.Backend` answering from a simulated engine on the running loop."""

    def __init__(
        self,
        config: SimConfig | None = None,
        *,
        max_retries: int = 0,
        backoff_s: float = 0.5,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.config = config or SimConfig()
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self._service: SimService | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._entered = 0
        self._born: float | None = None

    @property
    def service(self) -> SimService:
        """The simulated server (engine, metrics): there once the backend was first entered."""
        if self._service is None:
            raise RuntimeError("the in-process backend has no server before it is first entered")
        return self._service

    def metrics_text(self) -> str | None:
        """The server's ``/metrics`` text, as an HTTP client would read it: None before the backend is
        first entered (no server is listening yet), so a reader polling early waits instead of failing."""
        return None if self._service is None else self._service.metrics.render().decode()

    async def __aenter__(self) -> InProcessBackend:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            self._service = SimService(self.config, loop.time)
        elif loop is not self._loop:
            raise RuntimeError("an in-process backend serves only the event loop it was first entered on")
        if self._entered == 0:
            self._start_engine()
        self._entered += 1
        return self

    def _start_engine(self) -> None:
        engine = self.service.engine
        engine.start()
        if self._born is None:
            self._born = engine.started_at
        engine.started_at = self._born  # the same server running on: its warm-up is not repeated

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._entered -= 1
        if self._entered == 0:
            await self.service.engine.stop()

    async def generate(self, request: GenerationRequest) -> Generation:
        retry = 0
        while True:
            try:
                return dataclasses.replace(await self._attempt_in_time(request.params), retries=retry)
            except _AttemptFailed as failed:
                if not failed.retryable or retry >= self.max_retries:
                    failure = failed.failure
                    raise GenerationFailed(failure.kind, failure.reason, failure.status, retry) from None
                wait = failed.wait_s if failed.wait_s is not None else self.backoff_s * 2**retry
            await asyncio.sleep(wait)
            retry += 1

    async def _attempt_in_time(self, params: Mapping[str, Any]) -> Generation:
        if self.timeout_s is None:
            return await self._attempt(params)
        try:
            return await asyncio.wait_for(self._attempt(params), self.timeout_s)
        except asyncio.TimeoutError:
            raise _AttemptFailed("timeout", f"no answer within {self.timeout_s}s") from None

    async def _attempt(self, params: Mapping[str, Any]) -> Generation:
        service = self.service
        started = asyncio.get_running_loop().time()
        try:
            parsed = service.parse(functools.partial(responses_request, self.config.model), dict(params))
            admission = service.admit(parsed)
            if admission.fault == "hang":
                await asyncio.get_running_loop().create_future()  # never answered: the timeout ends it
            reply, seqs = service.submit(parsed, admission, RESPONSES.prefix)
        except Refusal as refusal:
            raise _refused(refusal) from None
        await service.finish(seqs)
        service.succeeded(reply)
        if admission.fault == "reset":
            raise _AttemptFailed("connection_error", "the connection was reset mid-response (simulated)")
        first_token = seqs[0].first_token_at if seqs[0].first_token_at is not None else started
        finished = asyncio.get_running_loop().time()
        return _generation(reply, {"ttft": first_token - started, "generation": finished - first_token})


def _generation(reply: Reply, timings: dict[str, float]) -> Generation:
    usage = TokenUsage(reply.prompt_tokens, reply.completion_tokens)
    return Generation(reply.output.text, RESPONSES.full(reply), usage, timings)
