"""The ``local`` launcher: worker processes on this machine, one shard at a time each.

Workers are started once (``spawn``: a clean interpreter, no copy of the driver's threads or
sockets) and kept for many shards, because start-up (seconds under load) would dominate short
shards. Each worker has its own pipe to the driver, so a worker killed in the middle of a
message harms no other, and the driver always knows which shard a dead worker held: that
shard is reported lost and a fresh worker takes the dead one's place.
"""

from __future__ import annotations

import multiprocessing
import signal
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from gymbench.collect.shard_events import ShardEvent
from gymbench.collect.shard_worker import ShardJob, collect_shard
from gymbench.errors import GymbenchError

STOP_TIMEOUT_S = 5.0
READY_TIMEOUT_S = 120.0


@dataclass
class _Worker:
    number: int
    process: Any
    connection: Connection
    shard: int | None = None


def _worker_main(connection: Connection) -> None:
    """A worker's life: shards in, progress and outcomes out, until told to stop or the pipe closes.

    A driver killed (SIGKILL, SIGTERM) closes the pipe: the next message to it fails, which stops
    the shard in hand (a progress report that raises halts a collection; its rows stay in the
    shard's file for a resume) and ends the worker quietly, without a BrokenPipeError traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle; it stops workers
    try:
        _serve(connection)
    except (OSError, EOFError):  # BrokenPipeError, ConnectionResetError: the driver is gone
        return


def _serve(connection: Connection) -> None:
    import gymbench.collect.driver  # noqa: F401 - imported before "ready": start-up is not collection time

    connection.send(("ready", None, None))
    while True:
        try:
            job: ShardJob | None = connection.recv()
        except EOFError:
            return
        if job is None:
            return
        outcome = collect_shard(job, lambda done, index=job.index: connection.send(("progress", index, done)))  # type: ignore[misc]
        connection.send(("done", job.index, outcome))


class LocalLauncher:
    """``num_workers`` processes on this machine."""

    name = "local"
    rows_travel_by = "files (this machine)"

    def __init__(self, num_workers: int) -> None:
        self.num_workers = num_workers
        self.context = multiprocessing.get_context("spawn")
        self.workers: list[_Worker] = []
        self.started_workers = 0

    def start(self) -> None:
        """Start the workers and wait until each has imported what a shard needs."""
        self.workers = [self._new_worker() for _ in range(self.num_workers)]
        for worker in self.workers:
            self._await_ready(worker)

    def _await_ready(self, worker: _Worker) -> None:
        if not worker.connection.poll(READY_TIMEOUT_S):
            raise GymbenchError(f"a worker process did not start within {READY_TIMEOUT_S:.0f} s")
        try:
            worker.connection.recv()
        except EOFError:
            code = worker.process.exitcode
            raise GymbenchError(f"a worker process died while starting ({_exit_reason(code)})") from None

    def _new_worker(self) -> _Worker:
        ours, theirs = self.context.Pipe()
        # Not a daemon: a worker may start processes of its own (the verifiers' process pool). It ends
        # when told, or when the driver's end of its pipe closes.
        process = self.context.Process(target=_worker_main, args=(theirs,), name="gymbench-shard-worker")
        process.start()
        theirs.close()
        self.started_workers += 1
        return _Worker(self.started_workers, process, ours)

    def free_slots(self) -> int:
        return sum(worker.shard is None for worker in self.workers)

    def busy(self) -> bool:
        return any(worker.shard is not None for worker in self.workers)

    def submit(self, job: ShardJob) -> None:
        worker = next(worker for worker in self.workers if worker.shard is None)
        worker.shard = job.index
        try:
            worker.connection.send(job)
        except (BrokenPipeError, OSError):
            pass  # it died idle; poll() sees it and reports the shard lost

    def poll(self, timeout: float) -> list[ShardEvent]:
        handles = [w.connection for w in self.workers]
        handles += [w.process.sentinel for w in self.workers if w.shard is not None]
        ready = set(wait(handles, timeout))
        events: list[ShardEvent] = []
        for worker in list(self.workers):
            dead = not worker.process.is_alive()  # before reading: what it sent before dying counts
            if dead or worker.connection in ready:
                events.extend(self._messages(worker))
            if dead:
                events.extend(self._replace(worker))
        return events

    def _messages(self, worker: _Worker) -> list[ShardEvent]:
        events = []
        try:
            while worker.connection.poll():
                kind, index, payload = worker.connection.recv()
                if kind == "progress":
                    events.append(ShardEvent("progress", index, done=payload))
                else:
                    worker.shard = None
                    events.append(ShardEvent("done", index, outcome=payload))
        except (EOFError, OSError):
            pass  # the worker is gone; poll() replaces it
        return events

    def _replace(self, worker: _Worker) -> list[ShardEvent]:
        """A dead worker: its shard (if any) is lost; a fresh worker takes its place."""
        code = worker.process.exitcode
        worker.connection.close()
        replacement = self._new_worker()
        self.workers[self.workers.index(worker)] = replacement
        self._await_ready(replacement)
        if worker.shard is None:
            return []
        reason = f"worker process {worker.process.pid} died ({_exit_reason(code)})"
        return [ShardEvent("lost", worker.shard, reason=reason)]

    def close(self) -> None:
        for worker in self.workers:
            try:
                worker.connection.send(None)
            except (BrokenPipeError, OSError):
                pass
        for worker in self.workers:
            worker.process.join(STOP_TIMEOUT_S if worker.shard is None else 0.1)
            if worker.process.is_alive():
                worker.process.terminate()
                worker.process.join(STOP_TIMEOUT_S)
            worker.connection.close()
        self.workers = []


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit status {code}"
