"""Latency percentiles with order-statistic intervals, the small-sample mark, and goodput."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.builtin.openai_backend import OpenAIBackend
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.rollout.latency import Slo, percentile_table, rollout_latencies
from gymbench.rollout.stats import CollectStats
from gymbench.sim import InProcessBackend, SimConfig, run_in_simulated_time, running_sim_server

ENGINE = SimConfig(step_base_s=0.01, step_per_seq_s=0.002, prefill_per_token_s=0.0005, output_tokens_mean=12,
                   max_num_seqs=4)  # fmt: skip


@pytest.mark.parametrize(("n", "q"), [(300, 50), (300, 90), (2000, 99)])
def test_intervals_cover_the_true_percentile_at_least_as_often_as_promised(n: int, q: int) -> None:
    rng = np.random.default_rng(q)
    truth = -np.log(1 - q / 100)  # the exponential distribution's quantile
    trials, covered, widths = 400, 0, []
    for _ in range(trials):
        found = percentile_table(rng.exponential(1.0, n))[f"p{q}"]
        assert not found["small_sample"]
        covered += found["low"] <= truth <= found["high"]
        widths.append(found["high"] - found["low"])
    assert covered / trials >= 0.93  # 95% promised; 400 trials carry about 1.1% of noise
    assert np.median(widths) < truth  # an interval, not the whole range


def test_too_few_rollouts_are_marked_not_given_an_interval() -> None:
    table = percentile_table(list(np.linspace(0.1, 1.0, 100)))
    assert table["count"] == 100
    assert not table["p50"]["small_sample"] and table["p50"]["low"] < table["p50"]["value"] < table["p50"]["high"]
    assert table["p99"]["small_sample"] and table["p99"]["low"] is None and table["p99"]["value"] > 0.98
    assert all(percentile_table([0.5])[f"p{q}"]["small_sample"] for q in (50, 90, 95, 99))


def test_per_rollout_latencies_follow_their_definitions() -> None:
    streamed = rollout_latencies({"connection_wait": 0.1, "ttft": 0.2, "generation": 0.9, "inter_token": 0.1}, 10)
    assert streamed == pytest.approx({"e2e": 1.2, "ttft": 0.2, "tpot": 0.1, "itl": 0.1})
    assert rollout_latencies({"generation": 2.0}, 4) == {"e2e": 2.0, "tpot": 0.5}
    assert not Slo(ttft_s=1.0).met({"e2e": 0.1})  # not streamed: no proof the TTFT objective was met


def write_tasks(path: Path, count: int) -> Path:
    rows = [
        {"responses_create_params": {"input": f"What is {i} + 1?"}, "expected_answer": str(i + 1)} for i in range(count)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


async def collect(backend: object, tmp_path: Path, slo: Slo, clock: object = None) -> CollectStats:
    settings = CollectSettings(write_tasks(tmp_path / "t.jsonl", 40), tmp_path / "o.jsonl", overwrite=True)
    extra = {"clock": clock} if clock is not None else {}
    collector = Collector(settings, backend, ExactMatchVerifier(), SemaphoreStrategy(8), **extra)  # type: ignore[arg-type]
    collector.slo = slo
    return await collector.run()


def test_goodput_counts_exactly_the_rollouts_within_the_slo(tmp_path: Path) -> None:
    async def main(slo: Slo) -> CollectStats:
        async with InProcessBackend(ENGINE) as backend:
            return await collect(backend, tmp_path, slo, asyncio.get_running_loop().time)

    first = run_in_simulated_time(main(Slo()))
    assert first.summary()["goodput"] is None  # no objective, no goodput
    e2e = sorted(first.latencies["e2e"].values)
    limit = e2e[len(e2e) // 3]
    stats = run_in_simulated_time(main(Slo(e2e_s=limit, ttft_s=1.0)))
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    expected = sum(rollout_latencies(r["timings"], r["usage"]["completion_tokens"])["e2e"] <= limit for r in rows)
    goodput = stats.summary()["goodput"]
    assert 0 < goodput["within_slo"] == expected < len(rows) and goodput["share"] == expected / len(rows)
    tables = stats.summary()["latency_percentiles_s"]
    assert set(tables) == {"ttft", "tpot", "e2e"} and tables["e2e"]["count"] == 40
    assert tables["ttft"]["p50"]["value"] < tables["e2e"]["p50"]["value"]


def test_a_streamed_collection_reports_inter_token_latency(tmp_path: Path) -> None:
    with running_sim_server(ENGINE) as server:
        backend = OpenAIBackend(OpenAISettings(base_url=server.base_url, model=ENGINE.model, api="chat", stream=True))
        stats = asyncio.run(collect(backend, tmp_path, Slo()))
    itl = stats.summary()["latency_percentiles_s"]["itl"]
    assert itl["count"] == 40 and itl["p50"]["value"] > 0


def test_the_timeline_adds_up_and_stays_bounded() -> None:
    from gymbench.rollout.timeline import MAX_BUCKETS, Timeline

    timeline = Timeline()
    for second in range(3 * MAX_BUCKETS):
        timeline.add(second + 0.5, 10, 0.2)
    found = timeline.to_dict()
    assert len(found["start_s"]) <= MAX_BUCKETS and found["bucket_s"] == 4.0
    assert sum(r * found["bucket_s"] for r in found["rollouts_per_s"]) == 3 * MAX_BUCKETS
    assert found["mean_e2e_s"] == pytest.approx([0.2] * len(found["start_s"]))


def test_streamed_rows_have_time_to_second_token_and_goodput_judges_itl_and_tpot(tmp_path: Path) -> None:
    with running_sim_server(ENGINE) as server:
        backend = OpenAIBackend(OpenAISettings(base_url=server.base_url, model=ENGINE.model, api="chat", stream=True))
        first = asyncio.run(collect(backend, tmp_path, Slo()))
        rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
        latencies = [rollout_latencies(r["timings"], r["usage"]["completion_tokens"]) for r in rows]
        assert all(found["ttft"] < found["ttst"] < found["e2e"] for found in latencies if "ttst" in found)
        assert first.summary()["latency_percentiles_s"]["ttst"]["count"] == sum("ttst" in f for f in latencies) > 0
        itl = sorted(f["itl"] for f in latencies if "itl" in f)[len(latencies) // 2]
        tpot = sorted(f["tpot"] for f in latencies)[len(latencies) // 2]
        for slo, name, limit in ((Slo(itl_s=itl), "itl", itl), (Slo(tpot_s=tpot), "tpot", tpot)):
            stats = asyncio.run(collect(backend, tmp_path, slo))
            rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
            expected = sum(
                rollout_latencies(r["timings"], r["usage"]["completion_tokens"]).get(name, float("inf")) <= limit
                for r in rows
            )
            goodput = stats.summary()["goodput"]
            assert goodput["within_slo"] == expected and goodput["slo"][f"{name}_s"] == limit
