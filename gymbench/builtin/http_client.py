"""The HTTP client every built-in backend shares: one pooled session, timeouts, bounded retries.

Pool limits are named as in NeMo Gym (``global_aiohttp_connector_limit``,
``global_aiohttp_connector_limit_per_host``). Every request has a finite timeout and at most
``max_retries`` retries (:mod:`gymbench.builtin.http_retry`). Time spent getting a connection is
measured per request by the connector itself, and the request's clock starts when it has one, so
the pool wait is counted once: in ``connection_wait``, not again in ``ttft`` or ``generation``.

The client's own delay is measured too (:class:`RequestClock`): how late the event loop ran a
callback scheduled when the request went out and while the answer came in, and the time from the
socket read that carried the first token (or the whole answer) to its timestamp. These are in
every latency the client reports and belong to no server. They are measured on a sample: every
request on one pooled connection in :data:`PROBED_CONNECTION_EVERY` (the first one always), since
the loop's lag is the process's, not the connection's; three scheduled callbacks on every request
were about a quarter of the client's CPU over a minimal aiohttp loop (issue 38).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
from aiohttp.client_proto import ResponseHandler

from gymbench.builtin.backend_settings import HttpSettings
from gymbench.builtin.http_retry import RETRYABLE_STATUS, RetryPolicy, failure_kind_for_status, retry_after_seconds
from gymbench.errors import GymbenchError, ServerUnreachable
from gymbench.secrets import redact, secret_from_env
from gymbench.types import GenerationFailed, GenerationRequest

if TYPE_CHECKING:
    from gymbench.builtin.routing import Router

T = TypeVar("T")
PREFLIGHT_TRIES = 3
REACH_TIMEOUT_S = 10.0
"""A reachability check's deadline for each of its tries, unless its caller gives one."""
CONNECTION_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)
PROBED_READS = 2
"""Socket reads of an answer whose event-loop lag is probed (after its headers: the first token's)."""
PROBED_CONNECTION_EVERY = 8
"""One pooled connection in this many (the 1st, 9th, ...) measures the client delay of its requests."""


@dataclass(slots=True)
class PoolClock:
    """One POST's time getting connections (all its tries) and when the last try got one."""

    waited: float = 0.0
    connected_at: float | None = None
    protocol: StampedResponseHandler | None = None
    """The last try's connection's protocol when it is a probed one (the response may have let the
    connection go by the time the reader runs: an answer read whole with its headers)."""
    send_probe: LagProbe | None = None
    """The last try's send-lag probe, scheduled once it had a probed connection."""


_POOL_CLOCK: ContextVar[PoolClock | None] = ContextVar("gymbench_pool_clock", default=None)


class LagProbe:
    """How long a callback scheduled now waits for the event loop: its backlog of ready work at
    this moment, which delays every step of every request the loop is running."""

    __slots__ = ("lag", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.lag: float | None = None
        self._scheduled = time.perf_counter()
        loop.call_soon(self._ran)

    def _ran(self) -> None:
        self.lag = time.perf_counter() - self._scheduled


class StampedResponseHandler(ResponseHandler):
    """aiohttp's protocol, noting when the socket was last read and how late the loop was then.

    Only the first reads of an answer are probed (:data:`PROBED_READS`), the ones that carry its
    headers and first token, and at most one probe is outstanding: a long stream costs two
    scheduled callbacks, not one per chunk."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.read_at = 0.0
        self.receive_lag = 0.0
        self._probe_at = 0.0
        """When the outstanding probe was scheduled; 0 when none is (the protocol is its own probe:
        a :class:`LagProbe` object per read cost an allocation and a bound method per rollout)."""
        self._probe_loop = loop
        self._probes_left = PROBED_READS

    def data_received(self, data: bytes) -> None:
        self.read_at = now = time.perf_counter()
        if self._probes_left > 0 and not self._probe_at:
            self._probes_left -= 1
            self._probe_at = now
            self._probe_loop.call_soon(self._probe_ran)
        super().data_received(data)

    def _probe_ran(self) -> None:
        if self._probe_at:
            lag = time.perf_counter() - self._probe_at
            if lag > self.receive_lag:
                self.receive_lag = lag
            self._probe_at = 0.0

    def lag_since_reset(self) -> float:
        """The largest receipt lag since :meth:`reset`, the probes that ran included."""
        return self.receive_lag

    def reset(self) -> None:
        self.receive_lag = 0.0  # a probe still outstanding (the headers' read) counts for this answer
        self._probes_left = PROBED_READS


class TimedConnector(aiohttp.TCPConnector):
    """Times how long each request waits to get a connection: queued for a free one in the
    pool (NeMo Gym #3008) or opening a new one. aiohttp's tracing hooks could say the same but
    cost a dozen awaited signals per request; this costs two clock reads. Its connections use
    :class:`StampedResponseHandler`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._opened = 0
        self._factory = self._protocol  # type: ignore[assignment]

    def _protocol(self) -> ResponseHandler:
        """A probed protocol for one new connection in :data:`PROBED_CONNECTION_EVERY`, aiohttp's own
        for the others (no per-read cost)."""
        self._opened += 1
        if self._opened % PROBED_CONNECTION_EVERY == 1 or PROBED_CONNECTION_EVERY == 1:
            return StampedResponseHandler(self._loop)
        return ResponseHandler(self._loop)

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        started = time.perf_counter()
        connection = await super().connect(req, traces, timeout)
        clock = _POOL_CLOCK.get()
        if clock is not None:
            clock.connected_at = time.perf_counter()
            clock.waited += clock.connected_at - started
            protocol = connection.protocol
            if isinstance(protocol, StampedResponseHandler):
                clock.protocol = protocol
                clock.send_probe = LagProbe(self._loop)
        return connection


class RequestClock:
    """The timestamps a reader takes, and the client's own delay in them.

    ``sent`` is when the request had its connection (the pool wait lies before it, in
    ``connection_wait``). :meth:`stamp` reads the clock for a token (or the whole answer); the
    first stamp also notes how long after the socket read that carried it the reader got to it."""

    __slots__ = ("sent", "_protocol", "_send_probe", "read_to_stamp")

    def __init__(self, sent: float, protocol: StampedResponseHandler | None, send_probe: LagProbe | None) -> None:
        self.sent = sent
        self._protocol = protocol
        self._send_probe = send_probe
        self.read_to_stamp: float | None = None
        if protocol is not None:
            protocol.reset()

    def stamp(self) -> float:
        now = time.perf_counter()
        if self.read_to_stamp is None and self._protocol is not None and self._protocol.read_at:
            self.read_to_stamp = max(0.0, now - self._protocol.read_at)
        return now

    def client_delay(self) -> dict[str, float]:
        """``send_lag_s``, ``receive_lag_s``, ``read_to_stamp_s`` (those measured)."""
        found: dict[str, float] = {}
        if self._send_probe is not None and self._send_probe.lag is not None:
            found["send_lag_s"] = self._send_probe.lag
        if self._protocol is not None:
            found["receive_lag_s"] = self._protocol.lag_since_reset()
        if self.read_to_stamp is not None:
            found["read_to_stamp_s"] = self.read_to_stamp
        return found


@dataclass(frozen=True)
class Reached:
    """What a reachability check got back: the status and the body."""

    status: int
    body: bytes


@dataclass(slots=True)
class Posted:
    """What a successful POST gave: the reader's result, how often it retried, pool wait."""

    value: Any
    retries: int
    connection_wait: float
    client_delay: dict[str, float] = dataclasses.field(default_factory=dict)
    """The last try's client delay (:meth:`RequestClock.client_delay`)."""


def auth_headers(api_key_env: Any) -> dict[str, str]:
    """``Authorization`` from the named variable; an unnamed one falls back to OPENAI_API_KEY if set.

    The key is stripped of surrounding whitespace (a trailing ``\r`` or newline is no part of it)
    and registered as a secret, so a server that echoes it back cannot put it in a failure
    reason, a row or a log line."""
    if api_key_env:
        key = secret_from_env(str(api_key_env))
        if not key:
            raise GymbenchError(
                f"the environment variable {api_key_env} (named by +api_key_env) is not set or blank; export it first"
            )
    else:
        key = secret_from_env("OPENAI_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def quoted(text: str, limit: int = 300) -> str:
    """Server or exception text fit for a failure reason: secrets redacted first, then cut (cut
    first, half a key could be left that no pattern recognises). Redact only once: ``redact`` of
    already redacted text can mangle it."""
    return redact(text)[:limit]


PREFLIGHT_MAX_BYTES = 16 * 1024 * 1024
"""The most of a reachability check's answer that is read (a head server's listing is kilobytes):
a server whose answer never ends grew the client to 6 GB in the preflight's 30 s."""


async def read_at_most(answer: aiohttp.ClientResponse, limit: int) -> bytes:
    """The answer's body, or one line when it is longer than ``limit`` (not an API's answer)."""
    body = bytearray()
    async for chunk in answer.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > limit:
            raise GymbenchError(
                f"{answer.url} answered more than {limit // (1024 * 1024)} MiB to a reachability check, so it "
                "is not the server gymbench expects there; check the URL"
            )
    return bytes(body)


@dataclass(frozen=True)
class Refusal:
    """One try that gave no usable answer: why, and whether another try may."""

    kind: str
    reason: str
    retryable: bool
    status: int | None = None
    retry_after: float | None = None


class RetryingClient:
    def __init__(self, settings: HttpSettings, what: str) -> None:
        """``settings`` were checked when built (:class:`~gymbench.builtin.backend_settings.HttpSettings`:
        finite timeouts above 0, since aiohttp reads 0 as no timeout at all and a bad value would not
        fail, it would quietly change what a run measures)."""
        self.what = what
        self.headers = auth_headers(settings.api_key_env)
        self.timeout = aiohttp.ClientTimeout(total=settings.request_timeout_s, sock_connect=settings.connect_timeout_s)
        self.retry = RetryPolicy(settings.max_retries, settings.backoff_base_s, settings.backoff_cap_s)
        self.limits = (settings.global_aiohttp_connector_limit, settings.global_aiohttp_connector_limit_per_host)
        self.preflight = settings.preflight
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        """How the client waits between tries; tests swap it to record the delays it asks for."""
        self._rng = random.Random()
        self.session: aiohttp.ClientSession | None = None

    async def open(self, probe_url: str | None) -> None:
        """Start the session and, with preflight on, check that ``probe_url`` answers.

        A failed check closes the session before raising: otherwise aiohttp prints "Unclosed
        client session" after the error, and that noise is the last thing a person reads."""
        connector = TimedConnector(limit=self.limits[0], limit_per_host=self.limits[1])
        headers = {"Content-Type": "application/json", **self.headers}
        self.session = aiohttp.ClientSession(connector=connector, timeout=self.timeout, headers=headers)
        if self.preflight and probe_url:
            try:
                await self.reach(probe_url)
            except BaseException:
                await self.close()
                raise

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def reach(self, url: str, what: str | None = None, timeout_s: float = REACH_TIMEOUT_S) -> Reached:
        """GET ``url`` until something answers; fail in seconds with one clear line, not after
        every rollout has spent its retries. Any status will do (servers share no health route)
        except 401/403, which no retry fixes. Every reachability check of every built-in backend,
        and the NeMo Gym head-server lookup, goes through here."""
        assert self.session is not None, "open the client first"
        last = ""
        for retry in range(PREFLIGHT_TRIES):
            if retry:
                await self.sleep(self.retry.delay(retry - 1, None, self._rng))
            try:
                async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as answer:
                    if answer.status in (401, 403):
                        raise GymbenchError(
                            f"{url} refused the credentials (HTTP {answer.status}); "
                            "check the variable named by +api_key_env"
                        )
                    return Reached(answer.status, await read_at_most(answer, PREFLIGHT_MAX_BYTES))
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                last = quoted(f"{type(exc).__name__}: {exc}")
        raise ServerUnreachable(
            f"cannot reach the {what or self.what} at {url} after {PREFLIGHT_TRIES} tries ({last}). Is it running?"
        )

    async def post(
        self,
        url: str,
        body: bytes,
        read: Callable[[aiohttp.ClientResponse, RequestClock], Awaitable[T]],
        explain: Callable[[int, str], str | None] | None = None,
        router: Router | None = None,
        request: GenerationRequest | None = None,
    ) -> Posted:
        """POST until a 200 (handed to ``read``), a non-retryable answer, or retries run out.

        ``explain(status, text)`` may say what to do about an error answer; the advice leads the
        failure reason, the server's own text follows it. With a ``router`` (several replicas),
        each try goes where it says for ``request`` (``url`` unused), and a try a dead replica
        failed is retried on another at once (:mod:`gymbench.builtin.routing`)."""
        if router is not None:
            return await self._post_routed(router, request, body, read, explain)
        assert self.session is not None, "open the client first"
        retries = 0
        pool = PoolClock()
        _POOL_CLOCK.set(pool)  # the calling rollout's own task context: no reset needed
        while True:
            outcome = await self._try_once(url, body, read, explain, pool)
            if not isinstance(outcome, Refusal):
                value, clock = outcome
                return Posted(value, retries, pool.waited, clock.client_delay())
            if not outcome.retryable or retries >= self.retry.max_retries:
                raise GenerationFailed(outcome.kind, outcome.reason, outcome.status, retries)
            await self.sleep(self.retry.delay(retries, outcome.retry_after, self._rng))
            retries += 1

    async def _post_routed(
        self,
        router: Router,
        request: GenerationRequest | None,
        body: bytes,
        read: Callable[[aiohttp.ClientResponse, RequestClock], Awaitable[T]],
        explain: Callable[[int, str], str | None] | None,
    ) -> Posted:
        """:meth:`post`'s loop over replicas: the same tries and limits, each counted on its replica."""
        assert self.session is not None, "open the client first"
        retries = 0
        pool = PoolClock()
        _POOL_CLOCK.set(pool)
        avoid = None
        while True:
            replica = router.choose(request, avoid)
            started = time.perf_counter()
            try:
                outcome = await self._try_once(replica.url, body, read, explain, pool)
            except BaseException:  # cancelled (a stop, Ctrl-C) or a reader's own error
                router.release(replica)
                raise
            if not isinstance(outcome, Refusal):
                router.settle(replica, None, time.perf_counter() - started)
                value, clock = outcome
                return Posted(value, retries, pool.waited, clock.client_delay())
            router.settle(replica, outcome.kind, 0.0)
            if not outcome.retryable or retries >= self.retry.max_retries:
                raise GenerationFailed(outcome.kind, f"{replica.name}: {outcome.reason}", outcome.status, retries)
            avoid = replica if router.fails_over(outcome.kind) else None
            if avoid is None:
                await self.sleep(self.retry.delay(retries, outcome.retry_after, self._rng))
            retries += 1

    async def _try_once(
        self,
        url: str,
        body: bytes,
        read: Callable[[aiohttp.ClientResponse, RequestClock], Awaitable[T]],
        explain: Callable[[int, str], str | None] | None,
        pool: PoolClock,
    ) -> tuple[T, RequestClock] | Refusal:
        assert self.session is not None
        pool.connected_at, pool.protocol, pool.send_probe = None, None, None
        started = time.perf_counter()
        try:
            async with self.session.post(url, data=body) as answer:
                if answer.status == 200:
                    clock = RequestClock(pool.connected_at or started, pool.protocol, pool.send_probe)
                    return await read(answer, clock), clock
                return await _refusal(answer, explain)
        except GenerationFailed as exc:  # the reader found the answer unusable: asking again won't help
            return Refusal(exc.kind, quoted(exc.reason), False, exc.status)
        except asyncio.TimeoutError:
            return Refusal("timeout", f"no answer within {self.timeout.total}s", True)
        except CONNECTION_ERRORS as exc:
            return Refusal("connection_error", quoted(f"{type(exc).__name__}: {exc}"), True)


async def _refusal(answer: aiohttp.ClientResponse, explain: Callable[[int, str], str | None] | None) -> Refusal:
    status = answer.status
    text = quoted(await answer.text(errors="replace"))
    advice = explain(status, text) if explain is not None else None
    reason = f"HTTP {status}: {advice} (the server said: {text})" if advice else f"HTTP {status}: {text}"
    retry_after = retry_after_seconds(answer.headers)
    return Refusal(failure_kind_for_status(status), reason, status in RETRYABLE_STATUS, status, retry_after)
