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
        collector = Collector(CollectSettings(tasks, out, overwrite=True), OpenAIBackend(settings),
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
