"""A rollout's stages are disjoint and add up to its total exactly.

The pool wait used to be counted twice: the request's clock started before aiohttp took a
connection, so ``ttft`` (streamed) or ``generation`` (whole) held the wait that ``connection_wait``
held again, and ``e2e`` came out longer than the rollout. A pool of one connection under eight
rollouts at a time makes every rollout but the first wait, on the simulator's real HTTP server.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.builtin.openai_backend import OpenAIBackend
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.rollout.latency import REQUEST_STAGES, ROLLOUT_STAGES, rollout_latencies
from gymbench.sim import SimConfig, running_sim_server

ENGINE = SimConfig(step_base_s=0.01, step_per_seq_s=0.0, prefill_per_token_s=0.0005, output_tokens_mean=6,
                   max_num_seqs=8)  # fmt: skip
ROLLOUTS = 16


def rows_of(tmp_path: Path, stream: bool, api: str) -> list[dict[str, object]]:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"responses_create_params": {"input": f"{i} + 1?"}}) + "\n"
                             for i in range(ROLLOUTS)))  # fmt: skip
    out = tmp_path / f"out-{stream}-{api}.jsonl"
    with running_sim_server(ENGINE) as server:
        settings = {"base_url": server.base_url, "model": ENGINE.model, "api": api, "stream": stream,
                    "global_aiohttp_connector_limit": 1}  # fmt: skip
        collector = Collector(CollectSettings(tasks, out, overwrite=True), OpenAIBackend(OpenAISettings(**settings)),
                              ExactMatchVerifier(), SemaphoreStrategy(8))  # fmt: skip
        stats = asyncio.run(collector.run())
    assert stats.completed == ROLLOUTS
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.parametrize(("stream", "api"), [(True, "chat"), (False, "chat"), (True, "responses")])
def test_every_stage_adds_up_to_the_total_with_a_one_connection_pool(tmp_path: Path, stream: bool, api: str) -> None:
    rows = rows_of(tmp_path, stream, api)
    assert sum(row["timings"]["connection_wait"] > 0.005 for row in rows) >= ROLLOUTS // 2  # the pool made them wait
    for row in rows:
        timings = row["timings"]
        assert ("ttft" in timings) == stream
        assert sum(timings.get(stage, 0.0) for stage in ROLLOUT_STAGES) == pytest.approx(timings["total"], abs=1e-9)
        assert timings["backend_other"] >= 0  # no stage holds time another stage holds too
        request = sum(timings.get(stage, 0.0) for stage in REQUEST_STAGES)
        assert rollout_latencies(timings, 6)["e2e"] == pytest.approx(request, abs=1e-12)
        assert request <= timings["total"] - timings["slot_wait"] - timings["verification"]


async def known_timing_rows(tmp_path: Path) -> tuple[list[dict[str, object]], list[dict[str, float]]]:
    from aiohttp import web

    from tests.known_timing_server import KnownTiming

    known = KnownTiming(ttft_base_ms=5.0, ttft_exp_ms=5.0, itl_ms=2.0, tokens=4, seed=1)
    runner = web.AppRunner(known.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"responses_create_params": {"input": f"{i}?"}}) + "\n" for i in range(24)))
    settings = {"base_url": f"http://127.0.0.1:{port}/v1", "model": "known", "api": "chat", "stream": True,
                "global_aiohttp_connector_limit": 2}  # fmt: skip
    out = tmp_path / "known.jsonl"
    try:
        collector = Collector(CollectSettings(tasks, out, overwrite=True), OpenAIBackend(OpenAISettings(**settings)),
                              ExactMatchVerifier(), SemaphoreStrategy(8))  # fmt: skip
        await collector.run()
    finally:
        await runner.cleanup()
    return [json.loads(line) for line in out.read_text().splitlines()], known.measured


def test_on_the_known_timing_server_no_request_is_shorter_than_the_server_made_it(tmp_path: Path) -> None:
    """Same process, same clock: a client cannot see a token before the server wrote it, so its
    TTFT and e2e are at least the server's (sorted, rank by rank), and its stages still add up,
    while six of eight rollouts at a time wait for one of two connections."""
    rows, measured = asyncio.run(known_timing_rows(tmp_path))
    assert len(rows) == len(measured) == 24
    assert sum(row["timings"]["connection_wait"] > 0.001 for row in rows) >= 8
    for name, stages in (("ttft", ("ttft",)), ("e2e", REQUEST_STAGES)):
        client = sorted(sum(row["timings"].get(s, 0.0) for s in stages) for row in rows)
        server = sorted(m[name] for m in measured)
        assert all(c >= s for c, s in zip(client, server, strict=True))
    for row in rows:
        timings = row["timings"]
        assert sum(timings.get(stage, 0.0) for stage in ROLLOUT_STAGES) == pytest.approx(timings["total"], abs=1e-9)
        assert timings["backend_other"] >= 0


def test_the_stages_added_by_name_are_the_request_stages() -> None:
    """rollout_timings and rollout_latencies add the request stages by name (no loop over the
    tuple on the hot path): each stage of REQUEST_STAGES, and only those, counts in e2e."""
    from gymbench.rollout.latency import rollout_timings
    from gymbench.types import Generation

    for stage in (*REQUEST_STAGES, "inter_token", "second_token"):
        generation = Generation("4", timings={stage: 0.25})
        timings = rollout_timings(0.5, generation, 1.0, 0.125)
        counted = stage in REQUEST_STAGES
        assert timings["backend_other"] == (0.75 if counted else 1.0)
        assert rollout_latencies(timings, 8)["e2e"] == (0.25 if counted else 0.0)
        assert timings["total"] == 1.625
