"""The client's own delay inside every latency it reports, and whether the client was the limit.

Every TTFT, ITL and e2e the client measures carries the client's delay: the event loop running
late when a request goes out or its answer comes in (other rollouts' parsing, verification, the
writer), and the time from the socket read to the timestamp. A percentile's interval covers the
sampling error only, so a figure measured by a busy client can exclude the server's true value
with a tight interval. The backend measures the delay per request
(:class:`gymbench.builtin.http_client.RequestClock`); this module counts it, says when it is
large beside the latencies ("client-bound"), and whether the client's share of CPU was the limit:
its CPU time near a whole core (its single event loop is saturated) or, on a machine shared with
other work, its thread waiting in the run queue for a CPU (``/proc/self/schedstat``), which a single
collecting process cannot win back and ``+num_workers`` (several processes) can.

The thresholds are the ones ``gymbench diagnose`` judges a busy client by.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from gymbench.rollout.reservoir import Reservoir

CLIENT_CORES = 0.8
"""CPU cores used by the collecting process at or above which its one event loop is saturated."""
CLIENT_LAG_S = 0.05
"""Event-loop lag (p99) at or above which the loop is late enough to be the limit."""
CLIENT_BOUND_SHARE = 0.1
"""The median client delay, as a share of the median latency, from which the figures are client-bound."""
RUN_QUEUE_SHARE = 0.3
"""The share of the run the client's thread waited for a CPU from which the machine's other work
took the client's share (it was runnable, not running)."""
COMPONENTS = ("send_lag_s", "receive_lag_s", "read_to_stamp_s")
SCHEDSTAT = Path("/proc/thread-self/schedstat")


class ClientDelaySummary(TypedDict):
    """The client's delay per request and its CPU over the run, with what they mean."""

    requests: int
    p50_s: float | None
    p99_s: float | None
    components_p50_s: dict[str, float | None]
    components_p99_s: dict[str, float | None]
    cpu_cores: float | None
    run_queue_share: float | None
    client_bound: bool
    cpu_limited: bool
    notes: list[str]


def cpu_clock() -> tuple[float, float | None]:
    """This process's CPU seconds and, where Linux says, this thread's seconds waiting to run."""
    try:
        waited = int(SCHEDSTAT.read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        waited = None
    return time.process_time(), waited


@dataclass
class ClientDelayStats:
    total: Reservoir = field(default_factory=Reservoir)
    parts: dict[str, Reservoir] = field(default_factory=lambda: {name: Reservoir() for name in COMPONENTS})
    cpu_s: float = 0.0
    run_queue_s: float | None = None
    _start: tuple[float, float | None] = field(default_factory=cpu_clock)

    def add(self, delay: Mapping[str, float]) -> None:
        self.add_many((delay,))

    def add_many(self, delays: Iterable[Mapping[str, float]]) -> None:
        """Each request's delay, in order (the statistics fold a batch of landed rollouts at once)."""
        columns: dict[str, list[float]] = {name: [] for name in COMPONENTS}
        totals = []
        for delay in delays:
            if not delay:
                continue
            total = 0.0
            for name in COMPONENTS:
                value = delay.get(name)
                if value is not None:
                    total += value
                    columns[name].append(value)
            totals.append(total)
        for name, values in columns.items():
            if values:
                self.parts[name].add_many(values)
        if totals:
            self.total.add_many(totals)

    def finish(self) -> None:
        """Take the CPU figures for the run so far (the run calls it once, when it ends)."""
        cpu, waited = cpu_clock()
        self.cpu_s = cpu - self._start[0]
        self.run_queue_s = waited - self._start[1] if waited is not None and self._start[1] is not None else None

    def absorb(self, other: ClientDelayStats) -> None:
        """A shard's: its samples, and its CPU added (each shard is its own process)."""
        self.total.absorb(other.total)
        for name in COMPONENTS:
            self.parts[name].absorb(other.parts[name])
        self.cpu_s += other.cpu_s
        if other.run_queue_s is not None:
            self.run_queue_s = (self.run_queue_s or 0.0) + other.run_queue_s

    def summary(self, elapsed: float, latency_p50: float | None, processes: int = 1) -> ClientDelaySummary:
        """``latency_p50``: the median the delay is set beside (TTFT when streamed, else e2e)."""
        p50, p99 = self.total.percentiles((50, 99))
        parts = {name: self.parts[name].percentiles((50, 99)) for name in COMPONENTS}
        lag_p99 = max((parts[name][1] or 0.0) for name in ("send_lag_s", "receive_lag_s"))
        cores = self.cpu_s / elapsed if elapsed > 0 and self.cpu_s else None
        queue = self.run_queue_s / elapsed / processes if elapsed > 0 and self.run_queue_s is not None else None
        bound = p50 is not None and (
            (latency_p50 is not None and p50 >= CLIENT_BOUND_SHARE * latency_p50) or lag_p99 >= CLIENT_LAG_S
        )
        cpu_limited = cores is not None and (cores / processes >= CLIENT_CORES or (queue or 0.0) >= RUN_QUEUE_SHARE)
        return {
            "requests": self.total.seen,
            "p50_s": p50,
            "p99_s": p99,
            "components_p50_s": {name: parts[name][0] for name in COMPONENTS},
            "components_p99_s": {name: parts[name][1] for name in COMPONENTS},
            "cpu_cores": cores,
            "run_queue_share": queue,
            "client_bound": bound,
            "cpu_limited": cpu_limited,
            "notes": _notes(bound, cpu_limited, p50, cores, queue, processes),
        }


def _notes(
    bound: bool, cpu_limited: bool, p50: float | None, cores: float | None, queue: float | None, processes: int
) -> list[str]:
    notes = []
    if bound and p50 is not None:
        notes.append(
            f"client-bound: figures include >= {p50 * 1e3:.1f} ms of client delay (half the requests at least "
            "that); the intervals cover sampling error only, so they may exclude the server's true latency"
        )
    if cpu_limited and cores is not None:
        waited = f", waited for a CPU {queue:.0%} of the run" if queue is not None else ""
        notes.append(
            f"the client's CPU share was the limit ({cores:.2f} cores over {processes} process(es){waited}): "
            f"+num_workers={2 * processes} runs the collection in {2 * processes} processes, each with its own "
            "event loop and share of the machine; it helps where the machine has idle cores (compare the runs' "
            "rollouts/s)"
        )
    return notes
