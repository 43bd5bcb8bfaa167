"""A measurement starts on an idle engine: :func:`gymbench.engine_metrics.settle` and its users.

llama.cpp's server keeps generating requests whose client went away (measured: 256 cancelled
requests kept 64 slots busy for 3 s), so a probe or calibration load started just after another
reads low. These tests use simulated time or a real HTTP server on 127.0.0.1 whose llama.cpp-named
gauges count down, never the wall clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

from gymbench.builtin.engines import LLAMACPP, gymbench_register_engine_metrics
from gymbench.calibrate.loadgen import settle_server
from gymbench.engine_metrics import Counters, Settled, sample_sums, settle
from gymbench.sim.virtual import run_in_simulated_time


def llamacpp_text(processing: int, deferred: int) -> str:
    return (
        "# TYPE llamacpp:requests_processing gauge\n"
        f"llamacpp:requests_processing {processing}\n"
        "# TYPE llamacpp:requests_deferred gauge\n"
        f"llamacpp:requests_deferred {deferred}\n"
        "# TYPE llamacpp:tokens_predicted_total counter\n"
        "llamacpp:tokens_predicted_total 100\n"
    )


def test_in_flight_adds_running_and_queued() -> None:
    sums = sample_sums(llamacpp_text(64, 192))
    assert LLAMACPP.in_flight(sums) == 256
    assert LLAMACPP.in_flight({}) is None


def countdown(values: list[float | None]) -> Iterator[float | None]:
    yield from values
    while True:
        yield values[-1]


def run_settle(values: list[float | None], max_s: float = 30.0) -> Settled:
    readings = countdown(values)

    async def main() -> Settled:
        async def in_flight() -> float | None:
            return next(readings)

        return await settle(in_flight, asyncio.get_running_loop().time, max_s=max_s, poll_s=0.25)

    return run_in_simulated_time(main())


def test_waits_until_the_engine_is_idle_and_says_so() -> None:
    settled = run_settle([256, 128, 64, 0])
    assert settled.held_at_start == 256 and settled.left == 0
    assert settled.waited_s == pytest.approx(0.75)
    note = settled.note()
    assert note is not None and "256 requests" in note


def test_an_idle_engine_costs_no_wait_and_no_note() -> None:
    settled = run_settle([0])
    assert settled.waited_s == 0 and settled.note() is None


def test_unreadable_gauges_are_not_waited_for() -> None:
    settled = run_settle([None])
    assert settled.waited_s == 0 and settled.held_at_start is None and settled.note() is None


def test_an_engine_busy_with_others_is_given_up_on_after_max_s() -> None:
    settled = run_settle([5], max_s=10.0)
    assert settled.left == 5 and 10.0 <= settled.waited_s <= 10.25
    note = settled.note()
    assert note is not None and "still held 5 requests" in note


def test_counters_read_in_flight_by_the_recognised_engine() -> None:
    texts = iter([llamacpp_text(3, 1)])
    counters = Counters(lambda: next(texts), engines=gymbench_register_engine_metrics())
    assert counters.in_flight() == 4
    assert counters.engine is not None and counters.engine.name == "llamacpp"


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """``app`` on 127.0.0.1 (a free port); its root URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def draining_server() -> AsyncIterator[tuple[str, list[int]]]:
    """A /metrics on 127.0.0.1 whose llama.cpp gauges drop by 2 requests at every read."""
    held = [6]
    reads = [0]

    async def metrics(request: web.Request) -> web.Response:
        reads[0] += 1
        text = llamacpp_text(min(held[0], 4), max(0, held[0] - 4))
        held[0] = max(0, held[0] - 2)
        return web.Response(text=text)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    async with serving(app) as root:
        yield f"{root}/metrics", reads


async def test_settle_server_reads_a_real_metrics_endpoint_until_idle(draining_server: tuple[str, list[int]]) -> None:
    url, reads = draining_server
    async with aiohttp.ClientSession() as session:
        settled = await settle_server(session, url, [LLAMACPP])
    # one read to recognise the engine (6 held), then 4, 2, 0
    assert settled.held_at_start == 4 and settled.left == 0 and reads[0] == 4


async def test_settle_server_without_metrics_returns_at_once() -> None:
    async with serving(web.Application()) as root, aiohttp.ClientSession() as session:
        settled = await settle_server(session, f"{root}/metrics", [LLAMACPP])
    assert settled == Settled(0.0, None, None)
