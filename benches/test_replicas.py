"""Many replicas behind one backend: does the client keep up, so that N replicas give N times one?

Four simulated replicas, each a continuous-batching server with room for ``PER_REPLICA`` sequences,
driven closed-loop at ``PER_REPLICA`` requests each through one ``openai`` backend routing
least-in-flight (each client's next try to the emptiest replica), against one replica alone at the
same ``PER_REPLICA``. ``four_over_four_times_one`` ≈ 1 says the routing and the one shared client
cost nothing that shows; the issue's target is within 5%. The servers' steps are long enough
(``step_base_s``) that the servers, not the client's CPU, set the pace on a small machine.
"""

from __future__ import annotations

import dataclasses

import pytest

from gymbench import Recorder
from gymbench.calibrate.loadgen import load_settings, run_closed_loop
from gymbench.sim import SimServerHandle, running_sim_replicas

REPLICAS = 4
PER_REPLICA = 8
SIM = {"model": "m", "max_num_seqs": PER_REPLICA, "step_base_s": 0.02, "step_per_seq_s": 0.0,
       "prefill_per_token_s": 0.0, "output_tokens_mean": 16}  # fmt: skip
TASK = {"input": "What is 1 + 1?"}


@pytest.fixture(scope="module")
def replicas() -> list[SimServerHandle]:
    with running_sim_replicas(replicas=REPLICAS, **SIM) as handles:
        yield handles


def test_four_replicas_against_four_times_one(gymbench: Recorder, replicas: list[SimServerHandle]) -> None:
    duration = 2.0 if gymbench.quick else 8.0
    one = load_settings(replicas[0].base_url, "m", max_retries=0)
    alone = run_closed_loop(one, TASK, PER_REPLICA, duration, warmup_s=0.5)
    spread = dataclasses.replace(one, base_url=[r.base_url for r in replicas], routing="least-in-flight")
    together = run_closed_loop(spread, TASK, REPLICAS * PER_REPLICA, duration, warmup_s=0.5)
    assert alone.errors == 0 and together.errors == 0
    ratio = together.requests_per_s / (REPLICAS * alone.requests_per_s)
    gymbench.record("one_replica_requests_per_s", alone.requests_per_s, "req/s", "higher")
    gymbench.record("four_replicas_requests_per_s", together.requests_per_s, "req/s", "higher")
    gymbench.record("four_over_four_times_one", ratio, "ratio", "higher")
    gymbench.extra.update(replicas=REPLICAS, per_replica_parallelism=PER_REPLICA, target="within 5% of 1.0")
