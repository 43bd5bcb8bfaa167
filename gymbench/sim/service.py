"""The simulated server's request path without a transport: limits, faults, planning, the engine.

The HTTP server (:mod:`gymbench.sim.server`) and the in-process backend
(:mod:`gymbench.sim.inprocess`) both serve requests through one :class:`SimService`, so a test in
simulated time sees the same 429s, faults, answers and metrics as a client of the real server.
A request that is answered with an error instead of a generation raises :class:`Refusal`, which
carries the error's HTTP shape; each transport renders it its own way.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gymbench.sim.config import SimConfig
from gymbench.sim.engine import Engine, QueueFull, Sequence, TooLarge
from gymbench.sim.limits import FaultPlan, RateLimiter
from gymbench.sim.metrics import ServerMetrics
from gymbench.sim.openai_format import RESPONSES, BadRequest, ParsedRequest, Reply
from gymbench.sim.text import Planner, count_tokens


class Refusal(Exception):
    """An error answer: status, OpenAI error fields, and the wait a client should honour."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after_s: float | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code
        self.retry_after_s = retry_after_s
        self.headers = headers


@dataclass(frozen=True)
class Admission:
    """A request past the rate limits and the fault draw."""

    prompt_tokens: int
    fault: str | None
    """``"hang"`` or ``"reset"`` for the transport to act out; ``None`` for a healthy request."""


def responses_request(model: str, params: Mapping[str, Any]) -> ParsedRequest:
    """A NeMo Gym row's ``responses_create_params`` as a non-streamed Responses API request."""
    return RESPONSES.parse({"model": model, **params, "stream": False})


class SimService:
    """The state behind one simulated server: engine, planner, limits, faults and metrics.

    ``clock`` drives the rate limits; it must be the engine's loop clock, or one that agrees with
    it (``time.monotonic`` is what asyncio's own loops use).
    """

    def __init__(self, config: SimConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.engine = Engine(config)
        self.planner = Planner(config)
        self.faults = FaultPlan(config)
        self.limiter = RateLimiter(config, clock())
        self.metrics = ServerMetrics(self.engine, self.faults, config.model)
        self._ids = itertools.count(1)

    def bad_request(self, message: str, param: str | None = None) -> Refusal:
        self.metrics.rejected.labels(reason="bad_request").inc()
        return Refusal(400, message, "invalid_request_error", param=param)

    def parse(self, parse: Callable[[dict[str, Any]], ParsedRequest], body: Any) -> ParsedRequest:
        """``parse`` applied to a decoded JSON body; raises a counted 400 :class:`Refusal`."""
        try:
            if not isinstance(body, dict):
                raise BadRequest("the request body must be a JSON object")
            return parse(body)
        except BadRequest as exc:
            raise self.bad_request(str(exc), exc.param) from None

    def admit(self, parsed: ParsedRequest) -> Admission:
        """Rate limits, then the fault draw; raises :class:`Refusal` (429, or a simulated 500)."""
        prompt_tokens = count_tokens(parsed.prompt)
        self._check_rate(parsed, prompt_tokens)
        fault = self.faults.draw()
        if fault is not None:
            self.metrics.faults.labels(kind=fault).inc()
        if fault == "error":
            raise Refusal(500, "simulated internal server error", "server_error", code="simulated")
        return Admission(prompt_tokens, fault)

    def _check_rate(self, parsed: ParsedRequest, prompt_tokens: int) -> None:
        if not self.limiter.active:
            return
        reserved = prompt_tokens + (parsed.max_tokens or self.config.max_output_tokens)
        decision = self.limiter.check(reserved, self.clock())
        if decision.allowed:
            return
        self.metrics.rejected.labels(reason="rate_limit").inc()
        raise Refusal(
            429,
            f"Rate limit reached for {decision.limit} per minute. Please retry after {decision.retry_after_s:.2f}s.",
            decision.limit,
            code="rate_limit_exceeded",
            retry_after_s=decision.retry_after_s,
            headers=decision.headers,
        )

    def submit(
        self,
        parsed: ParsedRequest,
        admission: Admission,
        id_prefix: str,
        on_token: Callable[[int], None] | None = None,
    ) -> tuple[Reply, Sequence]:
        """Plan the output and queue its sequence; raises :class:`Refusal` (queue full, too large)."""
        rng = self.planner.rng_for(parsed.prompt, parsed.seed)
        planned = self.planner.plan(parsed.question, parsed.max_tokens, rng)
        reply = Reply(
            request_id=f"{id_prefix}{next(self._ids):012x}",
            model=parsed.model,
            output=planned,
            prompt_tokens=admission.prompt_tokens,
            created=int(time.time()),
        )
        seq = Sequence(admission.prompt_tokens, len(planned.tokens), on_token=on_token)
        try:
            self.engine.submit(seq)
        except QueueFull as exc:
            self.metrics.rejected.labels(reason="queue_full").inc()
            raise Refusal(
                429,
                "the server's waiting queue is full; retry later",
                "server_busy",
                code="queue_full",
                retry_after_s=exc.retry_after_s,
            ) from None
        except TooLarge as exc:
            self.metrics.rejected.labels(reason="too_large").inc()
            raise Refusal(400, str(exc), "invalid_request_error", code="context_length_exceeded") from None
        return reply, seq

    async def finish(self, seq: Sequence) -> None:
        """Wait for the sequence's last token; a caller that gives up frees its slot."""
        try:
            await seq.done
        except asyncio.CancelledError:
            self.engine.cancel(seq)
            raise

    def succeeded(self, reply: Reply) -> None:
        self.metrics.success.labels(model_name=self.config.model, finished_reason=reply.output.finish_reason).inc()
