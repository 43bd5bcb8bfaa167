"""The server's own word on its capacity: where it is read, and where the search then starts.

Issue 39: tune started at 5 on llama.cpp with 4 slots and never measured below its knee.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gymbench.settings import build_settings
from gymbench.sim import SimConfig, running_sim_server
from gymbench.testing import make_plugins
from gymbench.tune.capacity import CapacitySignals, read_capacity
from gymbench.tune.command import tune_run
from gymbench.tune.config import TuneConfig
from gymbench.tune.report import summary_text, tune_result
from tests.sim.fake_llama import StepModel, fake_llama_server

TASKS = Path(__file__).resolve().parents[2] / "gymbench" / "data" / "example_tasks.jsonl"


@pytest.mark.parametrize(("slots", "configured", "start"), [(4, 5, 2), (64, 5, 5), (1, 5, 1), (4, 1, 1), (None, 5, 5)])
def test_the_search_starts_below_the_slot_count_never_above_its_start(
    slots: int | None, configured: int, start: int
) -> None:
    assert CapacitySignals(slots).start(configured) == start


def test_llama_cpps_props_give_the_slots() -> None:
    with fake_llama_server(StepModel(slots=4)) as url:
        found = read_capacity(None, url, None)
    assert found.slots == 4 and found.said[0] == "llama.cpp /props: total_slots 4"
    assert found.said[-1] == "no queue gauge (no recognised /metrics)"


def test_a_server_without_props_gives_no_slots_and_says_so() -> None:
    with running_sim_server(SimConfig(max_num_seqs=4)) as server:
        found = read_capacity(None, server.base_url, None)
    assert found.slots is None and found.said[0].startswith("no slot count (") and "/props not served" in found.said[0]


def test_a_tune_of_a_four_slot_simulator_starts_at_two_and_says_why() -> None:
    """The simulator standing in says where it saturates (its --describe); the first level is
    below it, and the output and the record name the signals used, the queue among them."""
    sim = {"max_num_seqs": 4, "step_base_s": 0.01, "step_per_seq_s": 0.0005, "output_tokens_mean": 8}
    settings = [f"input_jsonl_fpath={TASKS}", "save_results=false", "max_batches=6", "progress=false", "plot=",
                "max_parallelism=8", *[f"sim.{k}={v}" for k, v in sim.items()]]  # fmt: skip
    result = tune_run(build_settings(TuneConfig, settings), make_plugins())
    assert result.probes[0].parallelism == 2
    said = summary_text(result)
    assert "capacity signals: the simulator's --describe: it saturates at 4 sequences (limited by max_num_seqs)" in said
    assert "queue: vllm:num_requests_waiting at every level" in said
    assert "started at 2, below the slot count, instead of start=5" in said
    assert tune_result(result, {}).extra["capacity_signals"] == result.capacity


def test_replicas_slots_are_added_up_and_one_silent_replica_makes_the_total_unknown() -> None:
    with fake_llama_server(StepModel(slots=4)) as one, fake_llama_server(StepModel(slots=2)) as two:
        found = read_capacity(None, [one, two], None)
        with running_sim_server(SimConfig(max_num_seqs=4)) as silent:
            unknown = read_capacity(None, [one, silent.base_url], None)
    assert found.slots == 6 and found.said[:2] == [
        "2 replicas: llama.cpp /props: total_slots 4; llama.cpp /props: total_slots 2",
        "6 slots in all",
    ]
    assert unknown.slots is None and "/props not served" in unknown.said[0]


def test_a_tune_over_three_replicas_reads_their_summed_counters_and_says_the_knee_per_replica() -> None:
    """The load is spread over three simulated replicas: the server counters are the three's sums
    (they read the first replica alone, a third of the client's tokens), and the summary and the
    record give the knee and the recommendation per replica beside the totals."""
    from gymbench.sim import running_sim_replicas

    sim = {"model": "m", "max_num_seqs": 2, "step_base_s": 0.01, "step_per_seq_s": 0.0, "output_tokens_mean": 8}
    with running_sim_replicas(replicas=3, **sim) as servers:
        urls = "[" + ", ".join(server.base_url for server in servers) + "]"
        settings = [f"input_jsonl_fpath={TASKS}", "save_results=false", "max_batches=6", "progress=false", "plot=",
                    "max_parallelism=12", "start=3", f"base_url={urls}", "model=m", "routing=round-robin"]  # fmt: skip
        result = tune_run(build_settings(TuneConfig, settings), make_plugins())
    assert result.replicas == 3
    said = summary_text(result)
    knee = result.knee.parallelism
    assert f"over 3 replicas: the knee and the recommendation are totals; per replica the knee is {knee / 3:.1f}" in (
        said
    )
    assert not any("server counters read" in note for note in result.notes), result.notes  # sums agree with the client
    assert result.server is not None and str(result.server["url"]).count("/metrics") == 3
    per_replica = tune_result(result, {}).extra["per_replica"]
    assert per_replica["replicas"] == 3 and per_replica["recommended"] == result.recommended / 3
