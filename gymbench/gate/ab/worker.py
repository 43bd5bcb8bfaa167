"""The A/B runner's worker: a pytest session whose benchmarks time each round when told to.

The runner starts ``python -m pytest NODEIDS --gymbench-ab-worker`` in each commit's checkout,
with one end of a socket pair and the CPU to pin to in the environment. Each ``gymbench.measure``
(or ``ameasure``) does its warm-up, says it is ready, then runs a round whenever the runner asks
and reports the round's seconds per call: the runner alternates the two workers round by round.
Everything else about the benchmark (fixtures, set-up, the measured code) is the commit's own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from gymbench.record import benchmark_id

FD_ENV = "GYMBENCH_AB_FD"
CPU_ENV = "GYMBENCH_AB_CPU"


class WorkerLink:
    """This worker's end of the conversation with the runner; also a pytest plugin for outcomes."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.calls: dict[str, int] = {}
        self.pinned = False

    def pin(self) -> None:
        """Onto the runner's CPU, once, just before the first measurement: start-up may use every core."""
        cpu = os.environ.get(CPU_ENV)
        if cpu and not self.pinned:
            os.sched_setaffinity(0, {int(cpu)})
        self.pinned = True

    @classmethod
    def from_environment(cls) -> WorkerLink:
        if FD_ENV not in os.environ:
            raise pytest.UsageError("--gymbench-ab-worker is started by gymbench's A/B runner, not by hand")
        link = cls(Connection(int(os.environ[FD_ENV])))
        link.connection.send(("hello", os.getpid()))
        return link

    def pacer(self, nodeid: str) -> NodePacer:
        return NodePacer(self, nodeid)

    def next_call(self, nodeid: str) -> int:
        """How many measurements this test started before: matches the two sides' calls up."""
        self.calls[nodeid] = self.calls.get(nodeid, 0) + 1
        return self.calls[nodeid] - 1

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.connection.send(("failed", report.nodeid, report.when))

    def close(self) -> None:
        try:
            self.connection.send(("end",))
            self.connection.close()
        except OSError:
            pass  # the runner already went away; it reports that itself


class NodePacer:
    """One test's rounds, each run when the runner says so (:class:`gymbench.measure.RoundPacer`)."""

    def __init__(self, link: WorkerLink, nodeid: str) -> None:
        self.link = link
        self.nodeid = nodeid
        self.announced = False

    def next_round(self, metric: str, iterations: int) -> int | None:
        connection = self.link.connection
        if not self.announced:
            self.link.pin()
            connection.send(("ready", self.nodeid, metric, self.link.next_call(self.nodeid), iterations))
            self.announced = True
        command = connection.recv()
        if command[0] == "round":
            return int(command[1])
        self.announced = False
        return None

    def round_done(self, wall_s: float, cpu_s: float) -> None:
        self.link.connection.send(("time", wall_s, cpu_s))

    def threads_seen(self, helpers: int) -> None:
        """How many more threads worked in the probe with the BLAS/OpenMP limits lifted (before ``ready``)."""
        self.link.connection.send(("threads", self.nodeid, helpers))


def write_listing(items: Sequence[pytest.Item], path: Path) -> None:
    """The collected benchmarks, their ids and marker options, for the runner to match sides."""
    listing = [_listed(item) for item in items if "gymbench" in getattr(item, "fixturenames", ())]
    path.write_text(json.dumps(listing))


def _listed(item: pytest.Item) -> dict[str, object]:
    marker = item.get_closest_marker("gymbench")
    options = {k: v for k, v in (marker.kwargs if marker else {}).items() if isinstance(v, (bool, int, float, str))}
    callspec = getattr(item, "callspec", None)
    name = item.nodeid.split("[", 1)[0]
    bench_id = benchmark_id(name, dict(callspec.params) if callspec else {})
    return {"nodeid": item.nodeid, "id": bench_id, "options": options}
