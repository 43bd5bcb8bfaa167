"""``diagnose`` advice that fits what stands behind the backend: a model server, or an agent stack."""

from __future__ import annotations

import pytest

from gymbench.testing import make_plugins
from gymbench.tune.advice import AGENT_STACK, AGENT_STACK_STEPS, MODEL_SERVER, backend_kind
from gymbench.tune.command import diagnose_run
from gymbench.tune.config import DiagnoseConfig
from gymbench.tune.diagnose import NEXT_STEPS, diagnose
from gymbench.tune.probe import ProbeResult
from gymbench.tune.rates import Rate
from tests.nemo_gym.stack import stack_process

from .test_tune_and_diagnose import config


def probe(parallelism: int, rollouts_per_s: float, latency_s: float) -> ProbeResult:
    stages = {"generation": latency_s, "connection_wait": 0.0, "verification": 0.0}
    return ProbeResult(
        parallelism, Rate(rollouts_per_s, 0.02 * rollouts_per_s), "rollouts", 1.0, 100, 0.0, {}, 0, latency_s,
        latency_s * 1.5, None, None, 10 * rollouts_per_s, stages, 0.1, 0.001, 10.0,
    )  # fmt: skip


def test_a_saturated_agent_stack_gets_agent_advice_and_a_model_server_vllm_advice() -> None:
    diagnosis = diagnose(probe(2, 20.0, 0.1), probe(8, 21.0, 0.38))
    assert diagnosis.verdict == "model server" and diagnosis.backend_kind == MODEL_SERVER
    assert "max_num_seqs" in diagnosis.next_step and "resources" not in diagnosis.next_step
    diagnosis.backend_kind = backend_kind("nemo-gym")
    assert diagnosis.next_step.startswith("the agent stack behind /run is saturated")
    assert "agent and resources servers' CPU" in diagnosis.next_step


@pytest.mark.parametrize(
    ("low", "high", "gain", "verdict"),
    [
        (64, 128, 1.02, "model server"),  # llama.cpp's 64 slots: a doubling gave 2%; "parallelism" before the fix
        (4, 8, 1.15, "model server"),  # llama.cpp's 4 slots, past them: under the guide's 20%
        (64, 128, 1.25, "parallelism"),
        (1, 2, 1.40, "parallelism"),  # llama.cpp, one client to two on 4 slots: the lowest of nine runs
        (4, 12, 1.40, "model server"),  # a 3x step: half of it, 1.5x
        (4, 12, 1.60, "parallelism"),
        (1, 32, 1.90, "model server"),  # a wide step: the guide's 2x
        (1, 32, 2.10, "parallelism"),
    ],
)
def test_the_gain_that_names_parallelism_fits_the_step(low: int, high: int, gain: float, verdict: str) -> None:
    assert diagnose(probe(low, 20.0, 0.1), probe(high, 20.0 * gain, 0.1 * high / low / gain)).verdict == verdict


@pytest.mark.parametrize("verdict", sorted(NEXT_STEPS))
def test_every_verdict_has_advice_for_either_kind(verdict: str) -> None:
    diagnosis = diagnose(probe(2, 20.0, 0.1), probe(8, 80.0, 0.1))
    diagnosis.verdict = verdict
    diagnosis.backend_kind = AGENT_STACK
    assert diagnosis.next_step == AGENT_STACK_STEPS.get(verdict, NEXT_STEPS[verdict])
    assert backend_kind("openai") == backend_kind("a-plugin") == MODEL_SERVER


def test_diagnose_against_an_agent_stack_whose_agent_saturates() -> None:
    """An agent server that serves one run at a time: parallelism only queues at the agent.

    The verdict is the model server's (the slow part behind the client) unless the machine is so
    loaded that the client's own event loop lags 50 ms, when it is rightly the client's; either
    way the advice is the agent stack's, and never "raise parallelism"."""
    saturated = ["--agent", "concurrency=1", "overhead_s=0.03", "--sim", "step_base_s=0.002", "output_tokens_mean=8"]
    with stack_process(*saturated) as stack:
        settings = config(
            "agent_name=simple_agent", f"head_server.port={stack['head_port']}", "low=2", "high=8", "sample_size=40",
            schema=DiagnoseConfig,
        )  # fmt: skip
        diagnosis = diagnose_run(settings, make_plugins())
    assert diagnosis.backend_kind == AGENT_STACK and diagnosis.gain < 1.5, diagnosis.evidence
    assert diagnosis.verdict in ("model server", "client"), diagnosis.evidence
    assert diagnosis.next_step == AGENT_STACK_STEPS.get(diagnosis.verdict, NEXT_STEPS[diagnosis.verdict])


def test_a_stage_that_takes_the_time_wins_over_a_late_event_loop() -> None:
    """A loaded machine makes every event loop late; waiting for a connection is specific evidence."""
    low, high = probe(4, 20.0, 0.1), probe(16, 21.0, 0.1)
    high.stage_mean_s = {"slot_wait": 0.0, "connection_wait": 0.3, "ttft": 0.02, "generation": 0.08, "total": 0.4}
    high.loop_lag_p99_s, high.client_cpu_cores = 0.2, 0.3
    assert diagnose(low, high).verdict == "connection pool"
    high.stage_mean_s = {"slot_wait": 0.5, "connection_wait": 0.0, "ttft": 0.02, "generation": 0.08, "total": 0.6}
    assert diagnose(low, high).verdict == "client"  # the slot's own wait is not a stage of the rollout
    high.loop_lag_p99_s = 0.001
    assert diagnose(low, high).verdict == "model server"


def test_a_late_event_loop_with_the_servers_queue_full_is_the_model_server() -> None:
    """The client's loop is late because the model servers took the cores, and their queue holds
    most of the requests: the server is the limit. An empty queue leaves the verdict the client's,
    and a client that uses its cores is the client whatever the queue."""
    low, high = probe(3, 24.0, 0.1), probe(24, 27.0, 0.62)
    high.loop_lag_p99_s, high.client_cpu_cores, high.server_waiting_max = 0.41, 0.03, 22.0
    assert diagnose(low, high).verdict == "model server"
    high.server_waiting_max = 1.0
    assert diagnose(low, high).verdict == "client"
    high.server_waiting_max = None
    assert diagnose(low, high).verdict == "client"
    high.server_waiting_max, high.client_cpu_cores = 22.0, 0.95
    assert diagnose(low, high).verdict == "client"
