"""The simulated server's request path without a transport: limits, faults, planning, the engine.

The HTTP server (:mod:`gymbench.sim.server`) and the in-process backend
(:mod:`gymbench.sim.inprocess`) both serve requests through one :class:`SimService`, so a test in
simulated time sees the same 429s, faults, answers and metrics as a client of the real server.
A request that is answered with an error instead of a generation raises :class:`Refusal`, which
carries the error's HTTP shape; each transport renders it its own way.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gymbench.sim.config import SimConfig
from gymbench.sim.engine import Engine, QueueFull, Sequence, TooLarge
from gymbench.sim.limits import FaultPlan, RateLimiter
from gymbench.sim.metrics import ServerMetrics
from gymbench.sim.openai_format import Reply
from gymbench.sim.planner import Planner
from gymbench.sim.request import BadRequest, ParsedRequest
from gymbench.sim.text import count_tokens


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
        self.served = frozenset(config.served_models)
        self._ids = itertools.count(1)

    def bad_request(self, message: str, param: str | None = None) -> Refusal:
        self.metrics.rejected.labels(reason="bad_request").inc()
        return Refusal(400, message, "invalid_request_error", param=param)

    def parse(self, parse: Callable[[dict[str, Any]], ParsedRequest], body: Any) -> ParsedRequest:
        """``parse`` applied to a decoded JSON body; raises a counted 400 :class:`Refusal`, or a 404
        for a model the server does not serve (as vLLM answers; OpenAI's ``model_not_found``)."""
        try:
            if not isinstance(body, dict):
                raise BadRequest("the request body must be a JSON object")
            parsed = parse(body)
        except BadRequest as exc:
            raise self.bad_request(str(exc), exc.param) from None
        if parsed.model not in self.served:
            self.metrics.rejected.labels(reason="model_not_found").inc()
            message = f"The model `{parsed.model}` does not exist. Served: {', '.join(self.config.served_models)}."
            raise Refusal(404, message, "invalid_request_error", param="model", code="model_not_found")
        return parsed

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
        reserved = prompt_tokens + parsed.n * (parsed.max_tokens or self.config.max_output_tokens)
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
        on_token: Callable[[int, int], None] | None = None,
    ) -> tuple[Reply, list[Sequence]]:
        """Plan the choices and queue a sequence for each; ``on_token(choice, index)`` hears each
        token. Raises :class:`Refusal` (queue full, too large)."""
        choices = self.planner.plan(parsed)
        reply = Reply(
            request_id=f"{id_prefix}{next(self._ids):012x}",
            model=parsed.model,
            created=int(time.time()),
            prompt_tokens=admission.prompt_tokens,
            choices=choices,
            request=parsed,
        )
        seqs = [
            Sequence(
                admission.prompt_tokens, len(choice.tokens), functools.partial(on_token, index) if on_token else None
            )
            for index, choice in enumerate(choices)
        ]
        try:
            self.engine.submit(*seqs)
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
        return reply, seqs

    async def finish(self, seqs: list[Sequence]) -> None:
        """Wait for every sequence's last token; a caller that gives up frees their slots."""
        try:
            for seq in seqs:
                await seq.done
        except asyncio.CancelledError:
            self.cancel(seqs)
            raise

    def cancel(self, seqs: list[Sequence]) -> None:
        for seq in seqs:
            self.engine.cancel(seq)

    def succeeded(self, reply: Reply) -> None:
        for choice in reply.choices:
            self.metrics.success.labels(model_name=self.config.model, finished_reason=choice.finish_reason).inc()
