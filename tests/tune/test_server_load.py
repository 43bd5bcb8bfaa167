"""diagnose's per-server figures for a NeMo Gym stack: which server is full, and what could not be seen.

The figures are given (CPU seconds over a probe of known length), so no test depends on a clock;
the real stack's diagnose is in tests/nemo_gym/test_real_stack.py.
"""

from __future__ import annotations

import os

import pytest

from gymbench.server_instances import ServerInstance, cpu_seconds, parse_server_instances
from gymbench.tune.diagnose import diagnose
from gymbench.tune.server_load import HostLoad, ServerLoad, ServerMeter, full_server

from .test_advice import probe

LISTING = [
    {"process_name": "tools", "server_type": "resources_servers", "host": "127.0.0.1", "port": 1, "pid": 11},
    {"process_name": "agent", "server_type": "responses_api_agents", "host": "127.0.0.1", "port": 2, "pid": 12},
    {"process_name": "policy_model", "server_type": "responses_api_models", "host": "127.0.0.1", "port": 3, "pid": 13},
    {"process_name": "remote", "server_type": "resources_servers", "host": "gpu-box", "port": 4, "pid": 14},
    {"process_name": "old", "server_type": "responses_api_agents", "host": "127.0.0.1", "port": 5},
]


def loads(*shares: float, rollouts: int = 1000, elapsed: float = 10.0) -> list[ServerLoad]:
    """The first three listed servers with these shares of a core over ``elapsed`` seconds."""
    servers = parse_server_instances(LISTING)
    return [
        ServerLoad(server, share * elapsed, elapsed, rollouts) for server, share in zip(servers, shares, strict=False)
    ]


def test_the_listing_gives_roles_pids_and_what_is_local() -> None:
    servers = parse_server_instances([*LISTING, "not an entry"])
    assert [s.role for s in servers] == [
        "resources server", "agent server", "model adapter", "resources server", "agent server",
    ]  # fmt: skip
    assert [s.pid for s in servers] == [11, 12, 13, 14, None]
    assert [s.local for s in servers] == [True, True, True, False, True]


@pytest.mark.parametrize(
    ("shares", "queue", "host", "full"),
    [
        ((0.40, 0.95, 0.30), None, None, "agent"),  # the agent's event loop at a full core
        ((0.92, 0.50, 0.30), 0.0, None, "tools"),  # an empty model queue does not change it
        ((0.40, 0.95, 0.30), 6.0, None, None),  # requests waiting at the model server: the model is the limit
        ((0.20, 0.40, 0.20), None, HostLoad(0.5, 2), None),  # room left: nothing full, the model server is
        ((0.20, 0.40, 0.20), None, HostLoad(0.99, 2), "agent"),  # a full host: most CPU per rollout fills first
        ((0.02, 0.04, 0.02), None, HostLoad(0.99, 2), None),  # a full host the stack hardly uses: others fill it
    ],
)
def test_the_full_server(
    shares: tuple[float, ...], queue: float | None, host: HostLoad | None, full: str | None
) -> None:
    found = full_server(loads(*shares), queue, host)
    assert (found.server.name if found else None) == full


def test_diagnose_names_the_full_server_with_per_server_figures_and_the_driver() -> None:
    diagnosis = diagnose(probe(4, 40.0, 0.1), probe(32, 41.0, 0.8), servers=loads(0.30, 0.97, 0.25))
    assert diagnosis.verdict == "agent server"
    assert "the agent server fills its core first" in diagnosis.next_step
    lines = "\n".join(diagnosis.evidence)
    assert "agent server agent (pid 12, port 2): 9.70 ms CPU per rollout, 97% of a core, 103 rollouts/s" in lines
    assert "driver (gymbench): " in lines


def test_a_late_event_loop_on_a_busy_host_is_not_the_client_once_each_servers_cpu_is_seen() -> None:
    high = probe(32, 41.0, 0.8)
    high.loop_lag_p99_s = 0.2  # every loop is late on a loaded host
    assert diagnose(probe(4, 40.0, 0.1), high).verdict == "client"
    assert diagnose(probe(4, 40.0, 0.1), high, servers=loads(0.1, 0.2, 0.1)).verdict == "model server"


def test_remote_and_unlisted_servers_are_named_as_not_seen() -> None:
    meter = ServerMeter(parse_server_instances(LISTING))
    meter.start()
    found = {load.server.name: load for load in meter.finish(100)}
    assert found["remote"].cpu_s is None and "runs on gpu-box, not on this host" in found["remote"].line()
    assert found["old"].unseen == "the head server lists no pid for it (NeMo Gym before 0.7.0?)"
    diagnosis = diagnose(probe(4, 40.0, 0.1), probe(32, 41.0, 0.8), servers=list(found.values()))
    assert any(
        line.startswith("CPU not seen for: ") and "remote (it runs on gpu-box" in line for line in diagnosis.evidence
    )


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="per-process CPU is read from /proc (Linux)")
def test_cpu_seconds_of_this_process_grow_with_work() -> None:
    before = cpu_seconds([os.getpid()])[os.getpid()]
    sum(i * i for i in range(300_000))
    after = cpu_seconds([os.getpid(), 2**22 + 7])
    assert before is not None and after[os.getpid()] is not None and after[os.getpid()] >= before
    assert after[2**22 + 7] is None  # no such process


def test_a_server_instance_url() -> None:
    assert ServerInstance("a", "x", "::1", 5, None).url == "http://[::1]:5"
