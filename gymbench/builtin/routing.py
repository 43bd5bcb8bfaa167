"""Which replica a request goes to, when a backend has several ``base_url`` s.

RL post-training serves the policy from many data-parallel inference servers; NeMo Gym's
``vllm_model`` takes ``base_url`` as a list and pins each rollout to one of them. A
:class:`Router` is that choice, one per backend, made on every try with no hook call:

- ``sticky`` (the default): a rollout's identity (task, rollout) picks its replica, so every turn
  and every retry of it lands on the same one (its prefix cache); consecutive rollouts spread evenly,
  and nothing is remembered per rollout (a million-rollout run holds no table).
- ``round-robin``: each try to the next replica.
- ``least-in-flight``: each try to the replica with the fewest requests open.

A replica that fails :data:`OUT_AFTER` tries in a row by connection error or timeout is taken out
(one warning) and the run goes on over the rest; a request whose try it failed is retried on
another at once, without a backoff. The last live replica is never taken out: when every replica
is dead, requests fail as with one server (retries, then the run's failure breaker).

The router counts every try per replica (requests, answers, errors, open requests, a latency
sample) for :mod:`gymbench.replica_figures`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol
from urllib.parse import urlsplit

from gymbench.builtin.backend_settings import ROUTING_POLICIES
from gymbench.errors import ServerUnreachable
from gymbench.replica_figures import LATENCY_SAMPLE, ReplicaCounts, RoutingCounts
from gymbench.types import GenerationRequest

OUT_AFTER = 3
"""Connection errors or timeouts in a row that take a replica out (one is a blip, a dead server
fails every try at once)."""
REPLICA_FAILURES = frozenset({"connection_error", "timeout"})
"""The failures that say a replica is down, not that a request was refused."""


class Replica:
    """One server: where its requests go, and what it did."""

    __slots__ = ("name", "url", "models_url", "requests", "completed", "errors", "in_flight", "peak_in_flight",
                 "failures_in_a_row", "out", "latencies")  # fmt: skip

    def __init__(self, name: str, url: str, models_url: str) -> None:
        self.name, self.url, self.models_url = name, url, models_url
        self.requests = self.completed = self.errors = self.in_flight = self.peak_in_flight = 0
        self.failures_in_a_row = 0
        self.out = False
        self.latencies: list[float] = []

    def counts(self) -> ReplicaCounts:
        return ReplicaCounts(self.name, self.requests, self.completed, self.errors, self.peak_in_flight, self.out,
                             tuple(self.latencies))  # fmt: skip


class Router:
    def __init__(self, replicas: Sequence[Replica], policy: str, warn: Callable[[str], None]) -> None:
        assert policy in ROUTING_POLICIES and replicas, "checked by the backend's settings"
        self.replicas = list(replicas)
        self.policy = policy
        self.warn = warn
        self._next = 0
        self._rng = random.Random(0)
        self._pick = {"sticky": self._sticky, "round-robin": self._round_robin,
                      "least-in-flight": self._least_in_flight}[policy]  # fmt: skip

    def choose(self, request: GenerationRequest | None, avoid: Replica | None = None) -> Replica:
        """The replica for the next try of ``request``; ``avoid`` (the one that just failed it) only
        when no other is live. The chosen replica has the try counted as sent and open."""
        replica = self._pick(request, avoid)
        replica.requests += 1
        replica.in_flight = open_now = replica.in_flight + 1
        if open_now > replica.peak_in_flight:
            replica.peak_in_flight = open_now
        return replica

    def settle(self, replica: Replica, failure: str | None, elapsed_s: float) -> None:
        """One try ended: answered (``failure`` None, in ``elapsed_s``) or failed with that kind."""
        replica.in_flight -= 1
        if failure is None:
            replica.completed += 1
            replica.failures_in_a_row = 0
            self._sample(replica.latencies, replica.completed, elapsed_s)
            return
        replica.errors += 1
        if failure in REPLICA_FAILURES:
            replica.failures_in_a_row += 1
            if replica.failures_in_a_row >= OUT_AFTER:
                self.take_out(replica, f"{replica.failures_in_a_row} tries in a row failed ({failure})")
        else:
            replica.failures_in_a_row = 0

    def release(self, replica: Replica) -> None:
        """A try that ended neither answered nor refused (cancelled by a stop): no longer open, not
        an error (least-in-flight would shun a replica whose cancelled tries stayed open)."""
        replica.in_flight -= 1

    def fails_over(self, failure: str) -> bool:
        """Whether a retry after ``failure`` goes to another replica at once (no backoff: it is another server)."""
        return failure in REPLICA_FAILURES and self.live() > 1

    def take_out(self, replica: Replica, why: str) -> None:
        """Out of the rotation, with one warning; never the last live replica."""
        if replica.out or self.live() <= 1:
            return
        replica.out = True
        self.warn(
            f"replica {replica.name} taken out: {why}; the run goes on over the other {self.live()} "
            f"(its failed requests are retried there)"
        )

    def live(self) -> int:
        return sum(not replica.out for replica in self.replicas)

    def counts(self) -> RoutingCounts:
        return RoutingCounts(self.policy, tuple(replica.counts() for replica in self.replicas))

    def _sample(self, values: list[float], seen: int, value: float) -> None:
        """A fixed-size reservoir of the replica's latencies (memory stays flat over a long run)."""
        if len(values) < LATENCY_SAMPLE:
            values.append(value)
            return
        slot = self._rng.randrange(seen)
        if slot < LATENCY_SAMPLE:
            values[slot] = value

    def _usable(self, replica: Replica, avoid: Replica | None) -> bool:
        return not replica.out and replica is not avoid

    def _sticky(self, request: GenerationRequest | None, avoid: Replica | None) -> Replica:
        if request is None:
            return self._round_robin(request, avoid)
        identity = request.task_index + request.rollout_index
        own = self.replicas[identity % len(self.replicas)]  # consecutive ones: consecutive replicas
        if self._usable(own, avoid):
            return own
        # Its own is out: one of the usable others, by the identity again, so the rollouts of a dead
        # replica spread evenly over the rest (the next in the list took them all: a 1-slot replica
        # then carried 62% of a run) while each keeps to one replica and the others stay put.
        usable = [replica for replica in self.replicas if self._usable(replica, avoid)]
        return usable[identity // len(self.replicas) % len(usable)] if usable else self._fallback(avoid)

    def _round_robin(self, request: GenerationRequest | None, avoid: Replica | None) -> Replica:
        replicas, count = self.replicas, len(self.replicas)
        for _ in range(count):
            replica = replicas[self._next % count]
            self._next += 1
            if self._usable(replica, avoid):
                return replica
        return self._fallback(avoid)

    def _least_in_flight(self, request: GenerationRequest | None, avoid: Replica | None) -> Replica:
        best: Replica | None = None
        for replica in self.replicas:
            if self._usable(replica, avoid) and (best is None or replica.in_flight < best.in_flight):
                best = replica
        return best if best is not None else self._fallback(avoid)

    def _fallback(self, avoid: Replica | None) -> Replica:
        """No other live replica: the live one (even the one just failed), as with a single server."""
        for replica in self.replicas:
            if not replica.out:
                return replica
        return avoid or self.replicas[0]


def replica_router(base_urls: Sequence[str], path: str, policy: str) -> Router | None:
    """A router over ``base_urls`` (checked), each try POSTed to ``base_url + path``; None for one."""
    if len(base_urls) < 2:
        return None
    from gymbench.console import warn

    replicas = [Replica(replica_name(url), url + path, url + "/models") for url in base_urls]
    return Router(replicas, policy, warn)


def replica_name(base_url: str) -> str:
    """The replica as messages and the record name it: its URL without credentials."""
    parts = urlsplit(base_url)
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=host).geturl()


async def reach_replicas(client: _Reaches, router: Router) -> None:
    """Every replica answers before the run, or is taken out with a warning; none answering is the
    one-server error (the first replica's)."""
    found = await asyncio.gather(*(client.reach(r.models_url) for r in router.replicas), return_exceptions=True)
    for outcome in found:
        if isinstance(outcome, BaseException) and not isinstance(outcome, ServerUnreachable):
            raise outcome
    unreachable = [(r, o) for r, o in zip(router.replicas, found, strict=True) if isinstance(o, ServerUnreachable)]
    if len(unreachable) == len(router.replicas):
        raise unreachable[0][1]
    for replica, problem in unreachable:
        router.take_out(replica, f"it did not answer before the run ({problem})")


class _Reaches(Protocol):
    def reach(self, url: str) -> Awaitable[object]: ...
