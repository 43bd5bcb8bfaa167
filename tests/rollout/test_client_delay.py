"""The client's own delay is measured per request, kept in the rows and stated beside the
percentiles; a client whose event loop is held up says its figures are client-bound.

The loop is held up for certain, not by chance: a callback that blocks the loop for
:data:`BLOCK_S` and schedules itself again runs in every pass of the loop, so a callback
scheduled when a request goes out waits behind at least one block, however fast the machine.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.builtin.http_client import PROBED_CONNECTION_EVERY, StampedResponseHandler, TimedConnector
from gymbench.builtin.openai_backend import OpenAIBackend
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.collect.summary import format_summary
from gymbench.rollout.client_delay import COMPONENTS, ClientDelayStats
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.rollout.stats import CollectStats
from gymbench.sim import SimConfig, running_sim_server

ENGINE = SimConfig(step_base_s=0.002, step_per_seq_s=0.0, prefill_per_token_s=0.0, output_tokens_mean=4,
                   max_num_seqs=8)  # fmt: skip
BLOCK_S = 0.02
ROLLOUTS = 8


async def collect_with(tmp_path: Path, block: bool) -> tuple[CollectStats, list[dict[str, object]]]:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"responses_create_params": {"input": f"{i}?"}}) + "\n"
                             for i in range(ROLLOUTS)))  # fmt: skip
    out = tmp_path / f"out-{block}.jsonl"
    loop = asyncio.get_running_loop()
    blocking = [block]

    def hold_up() -> None:
        if blocking[0]:
            time.sleep(BLOCK_S)
            loop.call_soon(hold_up)

    loop.call_soon(hold_up)
    with running_sim_server(ENGINE) as server:
        settings = {"base_url": server.base_url, "model": ENGINE.model, "api": "chat", "stream": True}
        collector = Collector(CollectSettings(tasks, out, overwrite=True), OpenAIBackend(OpenAISettings(**settings)),
                              ExactMatchVerifier(), SemaphoreStrategy(4))  # fmt: skip
        try:
            stats = await collector.run()
        finally:
            blocking[0] = False
    return stats, [json.loads(line) for line in out.read_text().splitlines()]


def test_rows_carry_the_client_delay_and_a_held_up_loop_reads_client_bound(tmp_path: Path) -> None:
    stats, rows = asyncio.run(collect_with(tmp_path, block=True))
    assert len(rows) == ROLLOUTS
    sampled = [row["client_delay"] for row in rows if "client_delay" in row]
    assert sampled  # the first pooled connection is always probed
    for delay in sampled:
        assert set(delay) == set(COMPONENTS) and all(value >= 0 for value in delay.values())
        assert delay["send_lag_s"] >= BLOCK_S  # scheduled at send, it waited behind a block
    found = stats.summary()["client_delay"]
    assert found["requests"] == len(sampled) and found["client_bound"]
    assert found["p50_s"] >= BLOCK_S
    text = format_summary(stats.summary(), tmp_path / "out.jsonl")
    assert "client delay per request: p50" in text and "client-bound: figures include >= " in text


def test_an_idle_client_measures_its_delay_without_blaming_itself(tmp_path: Path) -> None:
    stats, rows = asyncio.run(collect_with(tmp_path, block=False))
    sampled = [row["client_delay"] for row in rows if "client_delay" in row]
    assert sampled and all(set(delay) == set(COMPONENTS) for delay in sampled)
    assert stats.summary()["client_delay"]["requests"] == len(sampled)


async def test_one_pooled_connection_in_eight_measures_the_client_delay() -> None:
    """The probes' cost is paid on a sample: the 1st, 9th, 17th... connection a connector opens."""
    connector = TimedConnector()
    try:
        made = [connector._protocol() for _ in range(3 * PROBED_CONNECTION_EVERY)]
    finally:
        await connector.close()
    probed = [index for index, protocol in enumerate(made) if isinstance(protocol, StampedResponseHandler)]
    assert probed == [0, PROBED_CONNECTION_EVERY, 2 * PROBED_CONNECTION_EVERY]


def test_a_client_short_of_cpu_says_so_and_names_num_workers() -> None:
    waited = ClientDelayStats()
    waited.add({"send_lag_s": 0.001, "receive_lag_s": 0.001, "read_to_stamp_s": 0.0001})
    waited.cpu_s, waited.run_queue_s = 2.1, 4.0  # 0.21 cores, 40% of the run waiting for a CPU
    found = waited.summary(elapsed=10.0, latency_p50=0.5)
    assert found["cpu_limited"] and not found["client_bound"]
    assert found["cpu_cores"] == 2.1 / 10.0 and found["run_queue_share"] == 0.4
    assert any("+num_workers=2" in note and "waited for a CPU 40%" in note for note in found["notes"])
    busy = ClientDelayStats(cpu_s=9.0, run_queue_s=0.0)
    busy.add({"send_lag_s": 0.001})
    assert busy.summary(elapsed=10.0, latency_p50=0.5)["cpu_limited"]  # a saturated event loop
    calm = ClientDelayStats(cpu_s=1.0, run_queue_s=0.5)
    calm.add({"send_lag_s": 0.001})
    assert not calm.summary(elapsed=10.0, latency_p50=0.5)["notes"]
    shards = ClientDelayStats(cpu_s=9.0, run_queue_s=0.0)  # two processes at 0.45 cores each
    shards.add({"send_lag_s": 0.001})
    assert not shards.summary(elapsed=10.0, latency_p50=0.5, processes=2)["cpu_limited"]


def test_an_interval_narrower_than_the_client_delay_is_named() -> None:
    from gymbench.collect.summary import narrow_interval_lines

    def cell(value: float, half: float) -> dict[str, object]:
        return {"value": value, "low": value - half, "high": value + half, "small_sample": False}

    tables = {
        "ttft": {"count": 400, "p50": cell(0.045, 0.002), "p99": cell(0.120, 0.004)},
        "itl": {"count": 25000, "p50": cell(0.008, 0.000003), "p99": {"value": 0.0081, "low": 0.0080,
                                                                       "high": None, "small_sample": False}},
    }  # fmt: skip
    delay = ClientDelayStats()
    for _ in range(10):
        delay.add({"send_lag_s": 0.0001, "receive_lag_s": 0.0001, "read_to_stamp_s": 0.00002})
    found = delay.summary(elapsed=1.0, latency_p50=0.045)
    (line,) = narrow_interval_lines(tables, found)
    assert "ITL p50" in line and "TTFT" not in line and "ITL p99" not in line  # p99's open side is not narrow
    assert narrow_interval_lines({"ttft": tables["ttft"]}, found) == []
    assert narrow_interval_lines(tables, None) == []
