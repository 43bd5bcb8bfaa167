"""The ``ray`` launcher: shards as Ray tasks on a cluster (core Ray only; ``pip install 'gymbench[ray]'``).

It attaches to a running cluster (``+ray_address=auto`` or ``HOST:PORT``, as NeMo Gym's
``ray_head_node_address``) or starts a local one with one CPU per worker. Each shard is a
generator task on the worker's main thread (plain, not async: see ``shard_worker``); progress goes
to a small actor the driver reads. Rows reach ``OUT.shards/`` one of two ways, decided by a probe
on every node: written there directly when every node sees the driver's file system, else
written to the node's own disk and streamed back through Ray's object store in chunks.

Retries are the driver's (the same for both launchers), so Ray's own task retries are off.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gymbench.collect.shard_events import ShardEvent
from gymbench.collect.shard_worker import ShardJob, ShardOutcome, collect_shard
from gymbench.console import warn
from gymbench.errors import GymbenchError
from gymbench.jsonio import AtomicFile

CHUNK_BYTES = 8 << 20
PROGRESS_TIMEOUT_S = 30.0
"""How long the driver waits for the progress actor's answer before it goes on without progress."""
QUIET = {"log_to_driver": False, "logging_level": logging.WARNING}
"""Workers' own output and Ray's start-up lines would tear the progress bar; errors still come back."""
INSTALL_HINT = "+launcher=ray needs Ray: pip install 'gymbench[ray]' (core ray only), or use +launcher=local"


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise GymbenchError(INSTALL_HINT) from None
    return ray


def node_local_path(job: ShardJob) -> str:
    """Where a node without the driver's file system keeps a shard: the same name on every attempt,
    so a retry on that node resumes it."""
    shard = Path(job.settings["output_jsonl_fpath"])
    run = hashlib.blake2b(str(shard.parent).encode(), digest_size=6).hexdigest()
    return str(Path(tempfile.gettempdir()) / "gymbench-shards" / run / shard.name)


def run_shard_task(job: ShardJob, board: Any, stream_rows: bool) -> Iterator[Any]:
    """The Ray task: collect, then (when the driver cannot see this node's files) stream the rows."""
    if stream_rows:
        job.settings = {**job.settings, "output_jsonl_fpath": node_local_path(job)}
        # made here and kept: the shards' start-up checks then share a folder none of them removes
        Path(job.settings["output_jsonl_fpath"]).parent.mkdir(parents=True, exist_ok=True)
    outcome = collect_shard(job, lambda done: _report(board, job.index, done))
    if stream_rows and outcome.error is None:
        local = Path(job.settings["output_jsonl_fpath"])
        with open(local, "rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                yield chunk
        for leftover in (local, local.with_name(local.name + ".run.json")):
            leftover.unlink(missing_ok=True)  # the driver has the rows now (a lost outcome redoes the shard)
    yield outcome


def _report(board: Any, shard: int, done: int) -> None:
    """Progress is best-effort: a progress actor that died (killed, its node lost) never stops a shard."""
    with contextlib.suppress(Exception):
        board.report.remote(shard, done)


class ProgressBoard:
    """Rollouts done per shard, as the workers last reported them (an actor the driver reads)."""

    def __init__(self) -> None:
        self.done: dict[int, int] = {}

    def report(self, shard: int, done: int) -> None:
        self.done[shard] = max(done, self.done.get(shard, 0))

    def snapshot(self) -> dict[int, int]:
        return dict(self.done)


def sees_file(path: str, token: str) -> bool:
    try:
        return Path(path).read_text() == token
    except OSError:
        return False


class RayLauncher:
    name = "ray"

    def __init__(self, num_workers: int, address: str | None, transfer: str, shards_directory: Path) -> None:
        self.num_workers = num_workers
        self.address = address
        self.transfer = transfer
        self.directory = shards_directory
        self.running: dict[Any, tuple[ShardJob, Any]] = {}
        self.ray: Any = None
        self.stream_rows = False
        self.rows_travel_by = "not started"
        self.board: Any = None
        self.landed: list[ShardEvent] = []
        """Shards already complete on the driver (streamed by an earlier run): done without a task."""

    def start(self) -> None:
        ray = self.ray = import_ray()
        if self.address is None:
            ray.init(address="local", num_cpus=self.num_workers, include_dashboard=False, **QUIET)
        else:
            ray.init(address=self.address, **QUIET)
        self.board = ray.remote(num_cpus=0)(ProgressBoard).remote()
        self.task = ray.remote(num_cpus=1, max_retries=0)(run_shard_task)
        self.stream_rows = self._decide_transfer()
        shared = "files (every node sees the driver's file system)"
        self.rows_travel_by = f"Ray's object store, {CHUNK_BYTES >> 20} MiB chunks" if self.stream_rows else shared

    def _decide_transfer(self) -> bool:
        """Stream rows through the object store unless every alive node sees the driver's files."""
        if self.transfer != "auto":
            return self.transfer == "object_store"
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        token = uuid.uuid4().hex
        probe = self.directory / f".probe-{token}"
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_text(token)
        try:
            check = self.ray.remote(num_cpus=0)(sees_file)
            nodes = [node["NodeID"] for node in self.ray.nodes() if node.get("Alive")]
            placed = [NodeAffinitySchedulingStrategy(node, soft=False) for node in nodes]
            seen = self.ray.get([check.options(scheduling_strategy=p).remote(str(probe), token) for p in placed])
        finally:
            probe.unlink(missing_ok=True)
        return not all(seen)

    def free_slots(self) -> int:
        return self.num_workers - len(self.running)

    def busy(self) -> bool:
        return bool(self.running)

    def submit(self, job: ShardJob) -> None:
        if self.stream_rows and (found := complete_rows(job)) is not None:
            self.landed.append(ShardEvent("done", job.index, outcome=_already_here(job, found)))
            return
        generator = self.task.remote(job, self.board, self.stream_rows)
        self.running[generator] = (job, None)

    def poll(self, timeout: float) -> list[ShardEvent]:
        events, self.landed = self.landed, []
        events += [ShardEvent("progress", shard, done=done) for shard, done in self._progress().items()]
        if not self.running:
            return events
        ready, _ = self.ray.wait(list(self.running), num_returns=len(self.running), timeout=timeout)
        for generator in ready:
            events.extend(self._next_item(generator))
        return events

    def _progress(self) -> dict[int, int]:
        """The workers' last reports; when the progress actor is gone (killed, its node lost, too
        slow to answer) one warning says so and the run goes on without a moving bar."""
        if self.board is None:
            return {}
        try:
            return dict(self.ray.get(self.board.snapshot.remote(), timeout=PROGRESS_TIMEOUT_S))
        except Exception as exc:  # noqa: BLE001 - any Ray error (ActorDiedError, GetTimeoutError...)
            self.board = None
            warn(f"Ray's progress actor is gone ({type(exc).__name__}); the run goes on, without progress reports")
            return {}

    def _next_item(self, generator: Any) -> list[ShardEvent]:
        job, incoming = self.running[generator]
        try:
            item = self.ray.get(next(generator))
        except self.ray.exceptions.RayError as exc:
            del self.running[generator]
            _discard(incoming)
            reason = f"Ray lost the task ({type(exc).__name__}: {_first_line(exc)})"
            return [ShardEvent("lost", job.index, reason=reason)]
        if isinstance(item, ShardOutcome):
            del self.running[generator]
            self._land(job, incoming, item)
            return [ShardEvent("done", job.index, outcome=item)]
        if incoming is None:
            incoming = AtomicFile(job.settings["output_jsonl_fpath"])  # spans calls: committed by _land
            self.running[generator] = (job, incoming)
        incoming.write(item)
        return []

    def _land(self, job: ShardJob, incoming: AtomicFile | None, outcome: ShardOutcome) -> None:
        """Streamed rows replace the driver's copy of the shard once the shard is complete."""
        if not self.stream_rows:
            return
        if outcome.error is not None:
            _discard(incoming)
            return
        if incoming is None:  # a shard with no rows
            incoming = AtomicFile(job.settings["output_jsonl_fpath"])
        incoming.commit()

    def close(self) -> None:
        for _job, incoming in self.running.values():
            _discard(incoming)
        self.running = {}
        if self.ray is not None and self.ray.is_initialized():
            self.ray.shutdown()


def complete_rows(job: ShardJob) -> int | None:
    """The rows of a shard the driver already holds whole (a streamed shard lands only complete)."""
    from gymbench.rollout.output import load_resume_state

    settings = job.settings
    path = Path(settings["output_jsonl_fpath"])
    if not path.exists():
        return None
    state = load_resume_state(path, settings["max_attempts"])
    expected = (settings["end_idx"] - settings["start_idx"]) * settings["num_repeats"]
    return len(state.done) if len(state.done) == expected and not state.attempts else None


def _already_here(job: ShardJob, rows: int) -> ShardOutcome:
    from gymbench.collect.shard_worker import worker_environment
    from gymbench.rollout.stats import CollectStats

    stats = CollectStats(skipped=rows)
    stats.finished = stats.started
    return ShardOutcome(job.index, job.attempt, worker_environment(), stats=stats)


def _discard(incoming: AtomicFile | None) -> None:
    if incoming is not None:
        incoming.discard()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]
