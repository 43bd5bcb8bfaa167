"""Which rank of a data-parallel run failed, with its own error, and which rank hung, within seconds.

When one rank raises, the others learn of it only from their collectives ("Connection closed by
peer" on rank 0, long after), and a rank that stops making progress holds every other rank in its
next all-reduce until gloo's 300 s timeout. So each rank keeps a side channel to the driver:

- a **heartbeat**: a counter the rank's training loop advances at every phase of every step (in
  memory, so a beat costs nothing measurable), with where it is, whether it is waiting for the
  others (a barrier, a gather), and the CPU time its working thread has used (a long phase
  computes; a hung rank does not); a thread publishes it (a file under torchrun, an actor method
  under Ray) every :data:`BEAT_INTERVAL_S`;
- its **own error**, recorded the moment it raises, before the other ranks notice.

The driver reads both while the ranks run. The first recorded error is the cause (the others'
errors follow from it), said in one line. When no rank's counter has moved and no rank has
computed (:data:`BUSY_CPU_S` of CPU) for the hang timeout,
the rank that hung is the one furthest behind among those not waiting for the others: the ranks
run the same phases in the same order, so the ones blocked in a collective are ahead of it.

No torch here: the driver imports this before any rank starts.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gymbench.jsonio import read_json_file, write_json_atomic

BEAT_INTERVAL_S = 0.5
"""How often a rank publishes its heartbeat; the driver polls at the same pace."""
BUSY_CPU_S = 0.1
"""CPU time the rank's working thread must use between polls to count as progress: a rank in a long
phase computes, a hung one (asleep, deadlocked, blocked in a collective) does not."""
STARTUP_S = 60.0
"""How long a rank may take to publish its first heartbeat (start a Python, import torch), and to go
on from one start-up phase to the next (building the model, DDP's first broadcast) until a rank has
begun its first step, before it is named as hung, when the hang timeout is shorter: start-up
under load is slow, not hung (at load 6 on 2 cores a rank sat 13 s building the model, using too
little CPU to count as busy: it was waiting for a CPU)."""
STEP_PREFIX = "step "
"""A heartbeat's ``where`` once its rank is in a training step (``step 3 forward``)."""


@dataclass(frozen=True)
class Beat:
    """One rank's progress as last published."""

    rank: int
    count: int
    where: str
    waiting: bool
    pid: int
    cpu_s: float = 0.0
    """CPU time of the thread that runs the rank's work."""


@dataclass(frozen=True)
class RankFailure:
    """A rank's own error, recorded when it raised."""

    rank: int
    error: str
    at: str
    time: float

    def line(self) -> str:
        return f"rank {self.rank} failed: {self.error}" + (f" (at {self.at})" if self.at else "")


def failure_of(rank: int, exc: BaseException) -> RankFailure:
    """The error as one line, and the innermost frame it came from (the rank's code, not the launcher's)."""
    text = str(exc).strip().splitlines()
    frames = traceback.extract_tb(exc.__traceback__)
    at = f"{Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return RankFailure(rank, f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__, at, time.time())


class Progress:
    """The rank's side of the heartbeat: ``advance`` from the training loop, ``snapshot`` from any thread."""

    def __init__(self, rank: int, pid: int) -> None:
        self.rank, self.pid = rank, pid
        self.count, self.where, self.waiting = 0, "starting", False
        self.failure: RankFailure | None = None
        self.worker = threading.get_ident()
        """The thread whose CPU time counts (Ray runs an actor's method in a thread of its own)."""

    def advance(self, where: str, waiting: bool = False) -> None:
        self.count += 1
        self.where, self.waiting = where, waiting

    def snapshot(self) -> dict[str, Any]:
        beat = Beat(self.rank, self.count, self.where, self.waiting, self.pid, _thread_cpu_s(self.worker))
        return {"beat": asdict(beat), "failure": asdict(self.failure) if self.failure else None}


def _thread_cpu_s(ident: int) -> float:
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (OSError, AttributeError):  # the thread ended, or no per-thread clocks here
        return 0.0


class FilePublisher:
    """Under torchrun: the rank's heartbeat (and error) as ``rank-R.json`` in a folder the driver reads."""

    def __init__(self, progress: Progress, folder: str) -> None:
        self.progress = progress
        self.path = Path(folder) / f"rank-{progress.rank}.json"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gymbench-heartbeat", daemon=True)

    def start(self) -> FilePublisher:
        self.publish()
        self._thread.start()
        return self

    def publish(self) -> None:
        write_json_atomic(self.path, self.progress.snapshot())

    def _run(self) -> None:
        while not self._stop.wait(BEAT_INTERVAL_S):
            self.publish()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.publish()


def read_folder(folder: str) -> list[dict[str, Any]]:
    """Every rank's last published snapshot (a rank not started yet has none)."""
    snapshots = []
    for path in sorted(Path(folder).glob("rank-*.json")):
        try:
            snapshots.append(read_json_file(path, "rank heartbeat"))
        except Exception:  # noqa: BLE001, S112 - a file being replaced is read on the next poll
            continue
    return snapshots


class RankWatch:
    """The driver's side: fed the ranks' snapshots at each poll, it says what went wrong, if anything."""

    def __init__(self, ranks: int, hang_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ranks, self.hang_s, self.clock = ranks, hang_s, clock
        self.beats: dict[int, Beat] = {}
        self.failures: dict[int, RankFailure] = {}
        self._progress: tuple[int, ...] = ()
        self._stepped: set[int] = set()
        """Ranks that have begun a training step: once one has, start-up is over (no rank steps before
        DDP's broadcast of the initial weights, which waits for every rank)."""
        self._cpu: list[float] = []
        self._started = self._since = clock()

    def observe(self, snapshots: Iterable[Mapping[str, Any]]) -> None:
        for snapshot in snapshots:
            beat = Beat(**snapshot["beat"])
            self.beats[beat.rank] = beat
            if beat.where.startswith(STEP_PREFIX):
                self._stepped.add(beat.rank)
            if snapshot.get("failure"):
                failure = RankFailure(**snapshot["failure"])
                self.failures.setdefault(failure.rank, failure)
        progress = tuple(self.beats[rank].count if rank in self.beats else -1 for rank in range(self.ranks))
        cpu = [self.beats[rank].cpu_s if rank in self.beats else 0.0 for rank in range(self.ranks)]
        busy = any(now - before >= BUSY_CPU_S for now, before in zip(cpu, self._cpu, strict=False))
        if progress != self._progress or busy:
            self._progress, self._cpu, self._since = progress, cpu, self.clock()

    def first_failure(self) -> RankFailure | None:
        """The cause: the error recorded first (the other ranks' errors follow from it)."""
        return min(self.failures.values(), key=lambda failure: failure.time, default=None)

    def hung(self) -> str | None:
        """Why the run is hung, naming the rank, or None while some rank progresses."""
        now = self.clock()
        missing = [rank for rank in range(self.ranks) if rank not in self.beats]
        if missing:
            waited = now - self._started
            if waited < max(self.hang_s, STARTUP_S):
                return None
            return f"rank {missing[0]} hung: no heartbeat from it in {waited:.0f} s (it never started its work)"
        stalled = now - self._since
        starting = not self._stepped  # DDP's first broadcast holds every rank until all have built
        if stalled < (max(self.hang_s, STARTUP_S) if starting else self.hang_s):
            return None
        working = [beat for beat in self.beats.values() if not beat.waiting] or list(self.beats.values())
        behind = min(working, key=lambda beat: beat.count)
        others = "; ".join(f"rank {b.rank} at {b.where}" for b in sorted(self.beats.values(), key=lambda b: b.rank)
                           if b.rank != behind.rank)  # fmt: skip
        return (
            f"rank {behind.rank} hung: no rank progressed for {stalled:.0f} s, and rank {behind.rank} (pid "
            f"{behind.pid}) stopped at {behind.where} while the others wait for it ({others}); "
            "raise +rank_hang_s if one phase of a step takes longer"
        )
