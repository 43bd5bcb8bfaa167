"""Interleaved A/B measurement: two worker processes on one CPU, taking single rounds in turn.

On a shared runner a process's speed drifts with its neighbours minute by minute, so two runs
measured one after the other differ by far more than a 10 % regression. Here both commits run
at once: one worker process each (:mod:`gymbench.gate.ab.worker`), pinned to the same CPU, and
for each benchmark the runner asks for one round at a time in ABBA order, so every baseline
round has a candidate round next to it under the same conditions. Whole worker pairs are then
repeated (``repeats``), because a process can be slow or fast for its whole life.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any

from gymbench.errors import GymbenchError
from gymbench.gate.ab.settings import ABSettings
from gymbench.gate.ab.sides import Side
from gymbench.gate.ab.worker import CPU_ENV, FD_ENV
from gymbench.gate.callgrind import DETERMINISTIC_ENV
from gymbench.gate.compare import Skipped
from gymbench.gate.matching import SuiteMatch
from gymbench.gate.paired import ABMeasurements, PairedRounds

MAX_CALLS_PER_ROUND = 1_000_000
END = (math.inf,)


@dataclass(frozen=True)
class Listed:
    """A collected benchmark: pytest's node id, gymbench's benchmark id, its marker options."""

    nodeid: str
    bench_id: str
    options: dict[str, Any]


def collect(side: Side, pytest_args: Sequence[str], timeout_s: float) -> list[Listed]:
    """The benchmarks ``pytest_args`` select in this side's checkout (none when they do not exist there)."""
    import json

    with tempfile.TemporaryDirectory(prefix="gymbench-ab-list-") as tmp:
        listing = Path(tmp) / "listing.json"
        command = [sys.executable, "-m", "pytest", *pytest_args, "--collect-only", "-q", "-p", "no:cacheprovider",
                   "--rootdir", str(side.cwd), "--gymbench-ab-list", str(listing)]  # fmt: skip
        done = subprocess.run(command, cwd=side.cwd, env=side.environment(), capture_output=True, text=True,
                              timeout=timeout_s, check=False)  # fmt: skip
        if done.returncode == 0 and listing.exists():
            return [Listed(e["nodeid"], e["id"], e["options"]) for e in json.loads(listing.read_text())]
        if done.returncode == 5 or (done.returncode == 4 and "not found" in done.stdout + done.stderr):
            return []  # the paths hold no tests on this side, or do not exist there yet
        raise GymbenchError(
            f"{side.label}: collecting the benchmarks failed (pytest exit {done.returncode}); a commit whose "
            f"gymbench predates the A/B runner cannot be a side:\n{_tail(done.stdout + done.stderr)}"
        )


class Worker:
    """One side's worker process and the runner's end of the socket pair to it."""

    def __init__(self, name: str, side: Side, nodeids: Sequence[str], cpu: int, log: Path, timeout_s: float) -> None:
        self.name, self.side, self.log, self.timeout_s = name, side, log, timeout_s
        self.failed: dict[str, str] = {}
        self.threads: dict[str, int] = {}
        """By node id: the threads besides the caller that worked in the probe (:mod:`gymbench.threads`)."""
        ours, theirs = Pipe(duplex=True)
        env = {**side.environment(), **DETERMINISTIC_ENV, FD_ENV: str(theirs.fileno()), CPU_ENV: str(cpu)}
        command = [sys.executable, "-m", "pytest", *nodeids, "-q", "-p", "no:cacheprovider",
                   "--rootdir", str(side.cwd), "--gymbench-ab-worker"]  # fmt: skip
        with log.open("w") as sink:
            self.process = subprocess.Popen(command, cwd=side.cwd, env=env, pass_fds=(theirs.fileno(),),
                                            stdout=sink, stderr=subprocess.STDOUT)  # fmt: skip
        theirs.close()
        self.connection: Connection = ours

    def receive(self) -> tuple[Any, ...]:
        try:
            if not self.connection.poll(self.timeout_s):
                raise GymbenchError(f"{self.side.label}: no word from the worker for {self.timeout_s:g} s")
            message: tuple[Any, ...] = self.connection.recv()
        except (EOFError, OSError):
            self.process.wait(timeout=30)
            raise GymbenchError(
                f"{self.side.label}: the worker stopped (exit {self.process.returncode}):\n{self.log_tail()}"
            ) from None
        return message

    def next_event(self) -> tuple[Any, ...]:
        """The next ``ready`` or ``end``; failed tests on the way are noted."""
        while True:
            message = self.receive()
            if message[0] == "failed":
                self.failed[message[1]] = message[2]
            elif message[0] == "threads":
                self.threads[message[1]] = max(int(message[2]), self.threads.get(message[1], 0))
            elif message[0] in ("ready", "end"):
                return message

    def round(self, calls: int) -> tuple[float, float]:
        """One round of ``calls``: wall and CPU seconds per call."""
        self.connection.send(("round", calls))
        message = self.receive()
        if message[0] != "time":
            raise GymbenchError(f"{self.side.label}: the worker answered {message[0]!r} to a round")
        return float(message[1]), float(message[2])

    def finish_measurement(self) -> None:
        self.connection.send(("done",))

    def stop(self) -> None:
        self.connection.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def log_tail(self) -> str:
        return _tail(self.log.read_text(errors="replace")) if self.log.exists() else ""


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


class ABRunner:
    """Measures the selected benchmarks of two sides, interleaved, ``settings.repeats`` times."""

    def __init__(self, base: Side, cand: Side, settings: ABSettings) -> None:
        self.sides = {"base": base, "cand": cand}
        self.settings = settings
        self.cpu = settings.cpu if settings.cpu is not None else max(os.sched_getaffinity(0))

    def run(self, pytest_args: Sequence[str], only: set[str] | None = None) -> ABMeasurements:
        """Collect ``pytest_args`` on both sides (keeping the node ids in ``only``), then measure."""
        from tqdm import tqdm

        listed = {name: collect(side, pytest_args, self.settings.timeout_s) for name, side in self.sides.items()}
        if only is not None:
            listed = {name: [e for e in entries if e.nodeid in only] for name, entries in listed.items()}
        data, selected = self._select(listed["base"], listed["cand"])
        if not selected:
            return data
        ids = {entry.nodeid: entry.bench_id for entry in selected}
        with tqdm(total=self.settings.repeats * len(selected), desc="A/B rounds", unit="bench", disable=None) as bar:
            for repeat in range(self.settings.repeats):
                failed = self._repeat(list(ids), ids, repeat, data, bar.update)
                data.skipped += [Skipped(ids[n], f"failed on {w}") for n, w in failed if ids[n] not in data.rounds]
        data.skipped += [
            Skipped(bench_id, "no gymbench.measure() call to interleave (it records its own metrics): "
                    "compare stored runs for it", inconclusive=False)
            for bench_id in ids.values()
            if not any(key[0] == bench_id for key in data.rounds) and not any(s.what == bench_id for s in data.skipped)
        ]  # fmt: skip
        data.skipped = list({(s.what, s.why): s for s in data.skipped}.values())
        return data

    def _select(self, base: list[Listed], cand: list[Listed]) -> tuple[ABMeasurements, list[Listed]]:
        base_ids = {entry.bench_id for entry in base}
        cand_ids = {entry.bench_id for entry in cand}
        data = ABMeasurements(
            match=SuiteMatch(
                common=[e.bench_id for e in cand if e.bench_id in base_ids],
                new=[e.bench_id for e in cand if e.bench_id not in base_ids],
                missing=[e.bench_id for e in base if e.bench_id not in cand_ids],
            ),
            options={e.bench_id: e.options for e in cand},
        )
        selected = [e for e in cand if e.bench_id in base_ids and e.options.get("ab", True) is not False]
        data.skipped = [
            Skipped(e.bench_id, "marked ab=False (multi-process, I/O- or latency-bound): report-only", False)
            for e in cand
            if e.bench_id in base_ids and e.options.get("ab", True) is False
        ]
        return data, selected

    def _repeat(
        self, nodeids: list[str], ids: dict[str, str], repeat: int, data: ABMeasurements, advance: Any
    ) -> list[tuple[str, str]]:
        """One fresh worker pair; returns the (node id, side) of tests that failed."""
        first, second = ("base", "cand") if repeat % 2 == 0 else ("cand", "base")
        with tempfile.TemporaryDirectory(prefix="gymbench-ab-") as tmp:
            workers = {
                name: Worker(name, self.sides[name], nodeids, self.cpu, Path(tmp) / f"{name}.log",
                             self.settings.timeout_s)
                for name in (first, second)
            }  # fmt: skip
            try:
                for worker in workers.values():
                    worker.receive()  # hello
                _Interleaving(workers, (first, second), nodeids, ids, self.settings, data, advance).run()
            finally:
                for worker in workers.values():
                    worker.stop()
                    for nodeid, helpers in worker.threads.items():
                        data.threads[ids[nodeid]] = max(helpers, data.threads.get(ids[nodeid], 0))
            return [(nodeid, self.sides[w.name].label) for w in workers.values() for nodeid in w.failed]


class _Interleaving:
    """One worker pair's conversation: match the two sides' measurements, then alternate rounds."""

    def __init__(
        self,
        workers: dict[str, Worker],
        order: tuple[str, str],
        nodeids: list[str],
        ids: dict[str, str],
        settings: ABSettings,
        data: ABMeasurements,
        advance: Any,
    ) -> None:
        self.workers, self.order, self.ids, self.settings, self.data = workers, order, ids, settings, data
        self.position = {nodeid: index for index, nodeid in enumerate(nodeids)}
        self.advance = advance

    def _key(self, event: tuple[Any, ...]) -> tuple[Any, ...]:
        return END if event[0] == "end" else (self.position.get(event[1], -1), event[3], event[2])

    def run(self) -> None:
        events = {name: worker.next_event() for name, worker in self.workers.items()}
        while not all(event[0] == "end" for event in events.values()):
            keys = {name: self._key(event) for name, event in events.items()}
            if keys["base"] == keys["cand"]:
                _, nodeid, metric, _, iterations = events["base"]
                wall, cpu = self._pair(int(iterations))
                self.data.add((self.ids[nodeid], metric), wall)
                self.data.add((self.ids[nodeid], f"{metric}_cpu"), cpu)
                self.advance(1)
                movers = list(self.workers)
            else:
                movers = [min(keys, key=lambda name: keys[name])]
                self._unpaired(events[movers[0]], self.workers[movers[0]].side)
            for name in movers:
                self.workers[name].finish_measurement()
                events[name] = self.workers[name].next_event()

    def _unpaired(self, event: tuple[Any, ...], side: Side) -> None:
        """A measurement the other side never reached (it failed, or measures differently now)."""
        what = f"{self.ids.get(event[1], event[1])} {event[2]}"
        self.data.skipped.append(Skipped(what, f"measured only on {side.label}", inconclusive=False))

    def _pair(self, iterations: int) -> tuple[PairedRounds, PairedRounds]:
        """ABBA rounds of one measurement: the paired wall times, and the paired CPU times."""
        first, second = (self.workers[name] for name in self.order)
        per_call = (first.round(iterations)[1] + second.round(iterations)[1]) / 2  # a probe round each, not kept
        calls = max(iterations, min(MAX_CALLS_PER_ROUND, math.ceil(self.settings.round_time_s / max(per_call, 1e-9))))
        times: dict[str, list[tuple[float, float]]] = {"base": [], "cand": []}
        for _ in range(max(1, self.settings.rounds // 2)):
            for worker in (first, second, second, first):
                times[worker.name].append(worker.round(calls))
        base, cand = times["base"], times["cand"]
        return (
            PairedRounds(tuple(w for w, _ in base), tuple(w for w, _ in cand)),
            PairedRounds(tuple(c for _, c in base), tuple(c for _, c in cand)),
        )
