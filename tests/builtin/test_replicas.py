"""The openai backend over several replicas: routing policies, a dead replica, the counts per replica.

Real simulated servers on 127.0.0.1; what is checked is counted (requests per replica, the servers'
own finished-request counters), never timed.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from gymbench import GenerationFailed, GenerationRequest, GymbenchError
from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.openai_backend import OpenAIBackend
from gymbench.builtin.routing import OUT_AFTER, Replica, Router
from gymbench.replica_figures import ReplicaCounts, RoutingCounts, replica_summary
from gymbench.sim import SimServerHandle, running_sim_replicas, start_sim_server

FAST = {"model": "m", "step_base_s": 0.002, "step_per_seq_s": 0.0, "prefill_per_token_s": 0.0, "output_tokens_mean": 4}
QUESTION = {"input": [{"role": "user", "content": "What is 6 * 7?"}]}


@pytest.fixture(scope="module")
def replicas() -> Iterator[list[SimServerHandle]]:
    with running_sim_replicas(replicas=3, **FAST) as handles:
        yield handles


def backend(urls: list[str], **settings: Any) -> OpenAIBackend:
    return OpenAIBackend(OpenAISettings(base_url=urls, model="m", backoff_base_s=0.01, **settings))


def dead_url() -> str:
    """A loopback address nothing listens on (a port just let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/v1"


async def no_wait(_: float) -> None:
    """The client's sleep between tries, not waited (the tries are counted, not timed)."""


def finished(server: SimServerHandle) -> float:
    return sum(v for k, v in server.metrics().items() if k.startswith("vllm:request_success"))


async def run_all(client: OpenAIBackend, keys: list[tuple[int, int]], parallel: int = 4) -> list[Any]:
    gate = asyncio.Semaphore(parallel)

    async def one(task: int, rollout: int) -> Any:
        async with gate:
            return await client.generate(GenerationRequest(task, rollout, QUESTION))

    return await asyncio.gather(*(one(t, r) for t, r in keys), return_exceptions=True)


def requests_per_replica(client: OpenAIBackend) -> list[int]:
    counts = client.replica_counts()
    assert counts is not None
    return [replica.requests for replica in counts.replicas]


async def test_sticky_keeps_every_call_of_one_rollout_on_one_replica(replicas: list[SimServerHandle]) -> None:
    before = [finished(server) for server in replicas]
    async with backend([s.base_url for s in replicas]) as client:
        await run_all(client, [(5, 1)] * 7)  # seven turns of one rollout
        counts = requests_per_replica(client)
    after = [finished(server) for server in replicas]
    assert sorted(counts) == [0, 0, 7]
    assert sorted(a - b for a, b in zip(after, before, strict=True)) == [0, 0, 7]  # the servers' own count agrees


async def test_sticky_spreads_consecutive_tasks_evenly(replicas: list[SimServerHandle]) -> None:
    async with backend([s.base_url for s in replicas]) as client:
        await run_all(client, [(task, 0) for task in range(30)])
        assert requests_per_replica(client) == [10, 10, 10]


def test_sticky_spreads_a_dead_replicas_rollouts_over_the_others_and_keeps_each_on_one() -> None:
    router = Router([Replica(str(i), f"u{i}", f"m{i}") for i in range(4)], "sticky", lambda _: None)
    router.take_out(router.replicas[1], "test")
    first = {task: router.choose(GenerationRequest(task, 0, QUESTION)).name for task in range(120)}
    assert [first[task] for task in range(120) if task % 4 != 1] == [
        str(task % 4) for task in range(120) if task % 4 != 1
    ]
    moved = [first[task] for task in range(120) if task % 4 == 1]  # replica 1's thirty
    assert sorted(moved.count(name) for name in "023") == [10, 10, 10]
    again = {task: router.choose(GenerationRequest(task, 0, QUESTION)).name for task in range(120)}
    assert again == first  # every later turn of a rollout goes where its first went


async def test_round_robin_takes_turns(replicas: list[SimServerHandle]) -> None:
    async with backend([s.base_url for s in replicas], routing="round-robin") as client:
        await run_all(client, [(0, 0)] * 12, parallel=1)
        assert requests_per_replica(client) == [4, 4, 4]


def test_least_in_flight_picks_the_emptiest_replica() -> None:
    router = Router([Replica(str(i), f"u{i}", f"m{i}") for i in range(3)], "least-in-flight", print)
    first, second, third = (router.choose(None) for _ in range(3))
    assert {first.name, second.name, third.name} == {"0", "1", "2"}  # each open once
    router.settle(second, None, 0.1)
    assert router.choose(None) is second  # the one whose request ended
    assert [r.peak_in_flight for r in router.replicas] == [1, 1, 1]


async def test_a_dead_replica_is_taken_out_once_and_its_requests_retried_elsewhere(
    replicas: list[SimServerHandle],
) -> None:
    warnings: list[str] = []  # nothing listens at the middle one: every try there is refused
    client = backend([replicas[0].base_url, dead_url(), replicas[1].base_url], preflight=False, max_retries=2)
    assert client.router is not None
    client.router.warn = warnings.append
    async with client:
        results = await run_all(client, [(task, 0) for task in range(30)])
        counts = client.replica_counts()
    assert not [r for r in results if isinstance(r, BaseException)]  # every rollout answered
    assert counts is not None
    live, gone, other = counts.replicas
    assert gone.out and gone.completed == 0 and gone.errors == gone.requests >= OUT_AFTER
    assert live.completed + other.completed == 30 and not live.out and not other.out
    assert len(warnings) == 1 and "taken out" in warnings[0] and "127.0.0.1" in warnings[0]


async def test_every_replica_dead_fails_as_one_server_does() -> None:
    client = backend([dead_url(), dead_url()], preflight=False, max_retries=8)
    client.client.sleep = no_wait
    async with client:
        with pytest.raises(GenerationFailed) as failed:
            await client.generate(GenerationRequest(0, 0, QUESTION))
    assert failed.value.kind == "connection_error"
    counts = client.replica_counts()
    assert counts is not None and sum(r.out for r in counts.replicas) == 1  # the last live one is never out


async def test_preflight_takes_an_unreachable_replica_out(replicas: list[SimServerHandle]) -> None:
    client = backend([replicas[0].base_url, dead_url()])
    assert client.router is not None
    warnings: list[str] = []
    client.router.warn = warnings.append
    client.client.sleep = no_wait
    async with client:
        await client.generate(GenerationRequest(0, 0, QUESTION))
    assert [r.out for r in client.router.replicas] == [False, True]
    assert len(warnings) == 1 and "did not answer before the run" in warnings[0]


def test_base_url_list_checks() -> None:
    with pytest.raises(GymbenchError, match="names a replica twice"):
        OpenAISettings(base_url=["http://a/v1", "http://a/v1/"], model="m").endpoints()
    with pytest.raises(GymbenchError, match=r"needs \+base_url=http://HOST:PORT/v1.*got 'ftp://b'"):
        OpenAISettings(base_url=["http://a/v1", "ftp://b"], model="m").endpoints()
    with pytest.raises(GymbenchError, match="routing"):
        OpenAISettings(base_url=["http://a/v1"], routing="random", model="m")
    assert OpenAIBackend(OpenAISettings(base_url=["http://a/v1"], model="m")).router is None  # one: as today


def test_the_straggler_is_named_and_the_imbalance_measured() -> None:
    def replica(url: str, requests: int, p50: float, out: bool = False) -> ReplicaCounts:
        return ReplicaCounts(url, requests, requests, 0, 2, out, (p50,) * 5)

    even = RoutingCounts("sticky", (replica("a", 10, 0.1), replica("b", 10, 0.11), replica("c", 10, 0.1)))
    slow = RoutingCounts("sticky", (replica("a", 10, 0.1), replica("b", 10, 0.1), replica("c", 10, 0.2)))
    starved = RoutingCounts("least-in-flight", (replica("a", 28, 0.1), replica("b", 28, 0.1), replica("c", 4, 0.1)))
    out = RoutingCounts("sticky", (replica("a", 10, 0.1), replica("b", 10, 0.1), replica("c", 3, 9.0, out=True)))
    assert replica_summary(even, 1.0)["straggler"] is None
    found = replica_summary(slow, 2.0)
    assert found["straggler"] == "c" and "2.0x" in (found["straggler_reason"] or "")
    assert found["imbalance"] == 1.0 and found["replicas"][0]["completed_per_s"] == 5.0
    starving = replica_summary(starved, 1.0)
    assert starving["straggler"] == "c" and starving["imbalance"] == pytest.approx(28 / 20)
    assert replica_summary(out, 1.0)["straggler"] is None  # out, not straggling


async def test_a_replica_killed_mid_run_costs_its_open_requests_one_retry_each(
    replicas: list[SimServerHandle],
) -> None:
    """The middle replica holds every request it gets (hang_rate 1) until it is killed: those open
    requests fail over to the others, the rest of the rollouts never notice, one warning is given."""
    hanging = start_sim_server(hang_rate=1.0, **FAST)
    warnings: list[str] = []
    client = backend([replicas[0].base_url, hanging.base_url, replicas[1].base_url], max_retries=1)
    assert client.router is not None
    client.router.warn = warnings.append
    stuck = client.router.replicas[1]
    try:
        async with client:
            running = asyncio.ensure_future(run_all(client, [(task, 0) for task in range(12)], parallel=12))
            for _ in range(2000):  # until the hanging replica holds its four (a deadline, not a measurement)
                if stuck.in_flight == 4:
                    break
                await asyncio.sleep(0.005)
            assert stuck.in_flight == 4
            await asyncio.to_thread(hanging.stop, 1)
            results = await asyncio.wait_for(running, 60)
    finally:
        hanging.stop(timeout=1)
    assert not [r for r in results if isinstance(r, BaseException)]
    assert sorted(r.retries for r in results) == [0] * 8 + [1] * 4  # its four open requests, each once
    assert stuck.out and stuck.requests == 4 and stuck.errors == 4
    assert len(warnings) == 1


async def test_a_cancelled_request_is_no_longer_open_on_its_replica() -> None:
    """A stopped run cancels its open requests: least-in-flight must not see them open for ever."""
    hanging = start_sim_server(hang_rate=1.0, **FAST)
    other = start_sim_server(hang_rate=1.0, **FAST)
    try:
        client = backend([hanging.base_url, other.base_url], routing="least-in-flight")
        async with client:
            open_one = asyncio.ensure_future(client.generate(GenerationRequest(0, 0, QUESTION)))
            assert client.router is not None
            for _ in range(2000):
                if sum(r.in_flight for r in client.router.replicas) == 1:
                    break
                await asyncio.sleep(0.005)
            open_one.cancel()
            with pytest.raises(asyncio.CancelledError):
                await open_one
            assert [r.in_flight for r in client.router.replicas] == [0, 0]
            assert sum(r.errors for r in client.router.replicas) == 0
    finally:
        hanging.stop(timeout=1)
        other.stop(timeout=1)
