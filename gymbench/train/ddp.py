"""One rank of a data-parallel training-step benchmark, the same code under torchrun and under Ray.

A rank reads torchrun's environment contract (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``); the Ray launcher sets the same variables in each actor, so
nothing here knows which launcher started it. Each rank trains the model wrapped in torch's
``DistributedDataParallel`` on its share of the global batch (its own data), and measures:

- steps with gradient sync, then checks that the replicas are bit-identical;
- pairs of steps with and without sync (``no_sync``), in alternation, so that machine load falls
  on both alike: their difference is the all-reduce time the step does not hide;
- a bare all-reduce of a gradient-sized buffer;
- on rank 0 alone (the others wait), plain steps of the same per-rank batch: the ``--dp 1``
  reference for the scaling efficiency.

Every rank's figures are gathered to rank 0, which returns (or, under torchrun, writes) them.
Each rank keeps a heartbeat and records its own error (:mod:`gymbench.train.rank_watch`), so the
driver names a failing rank with its own error and a hung rank within seconds. With nccl a rank
binds its GPU (``torch.cuda.set_device(local_rank)``) before the process group starts: otherwise
every rank's collectives (``all_gather_object`` among them) would run on ``cuda:0``.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import pickle
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from gymbench.jsonio import read_json_file, write_json_atomic
from gymbench.train.config import TrainConfig
from gymbench.train.gpu_monitor import GpuMonitor
from gymbench.train.phases import PhaseObserver
from gymbench.train.rank_watch import FilePublisher, Progress, failure_of
from gymbench.train.session import ModelFactory, TrainSession
from gymbench.types import JSONObject

CONTRACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
INIT_TIMEOUT_S = 300
RANK_FOLDER_ENV = "GYMBENCH_RANK_FOLDER"
"""Under torchrun: the folder where each rank publishes its heartbeat and error for the driver."""
NO_GPU = {"available": False, "reason": "no GPU: this rank runs on the CPU (gloo)"}


class PhaseBeats:
    """A phase observer that advances the rank's heartbeat at every phase of a step."""

    def __init__(self, progress: Progress, step: str) -> None:
        self.progress, self.step = progress, step

    def start(self) -> None:
        return None

    def phase(self, name: str) -> AbstractContextManager[object]:
        self.progress.advance(f"{self.step} {name}")
        return contextlib.nullcontext()

    def mark(self, event: str) -> None:
        return None


@contextlib.contextmanager
def waiting(progress: Progress, what: str) -> Iterator[None]:
    """A collective the rank waits in for the others: a rank stuck here is not the one that hung."""
    progress.advance(f"waiting at {what}", waiting=True)
    yield
    progress.advance(f"past {what}")


class DataParallelSession(TrainSession):
    """A session whose forward goes through DDP (gradients averaged across ranks in backward)."""

    def __init__(self, factory: ModelFactory, config: TrainConfig, rank: int, progress: Progress) -> None:
        progress.advance("building the model")
        super().__init__(factory, config)  # the same seed everywhere: the same initial weights
        self.progress = progress
        self.steps_taken = 0
        self.generator.manual_seed(config.seed + 1 + rank)  # each rank its own data
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        with waiting(progress, "DDP's broadcast of the initial weights"):
            self.replica = DistributedDataParallel(self.model, device_ids=device_ids)
        self.through_replica = True

    def step(self, observer: PhaseObserver | None = None) -> torch.Tensor:
        self.steps_taken += 1
        return super().step(observer or PhaseBeats(self.progress, f"step {self.steps_taken}"))

    def forward(self, batch: Any) -> torch.Tensor:
        module = self.replica if self.through_replica else self.model
        with self.precision.autocast():
            return module(*batch) / self.config.accumulation

    def parameter_digest(self) -> str:
        flat = torch.cat([p.detach().reshape(-1).float().cpu() for p in self.model.parameters()])
        return hashlib.sha256(flat.numpy().tobytes()).hexdigest()

    def gradient_elements(self) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)


def rank_environment() -> JSONObject:
    return {
        "rank": int(os.environ["RANK"]),
        "world_size": int(os.environ["WORLD_SIZE"]),
        "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
        "host": os.uname().nodename,
        "pid": os.getpid(),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch_threads": torch.get_num_threads(),
    }


def run_rank(
    job: Mapping[str, Any], factory: ModelFactory | None = None, progress: Progress | None = None
) -> JSONObject | None:
    """This rank's part; rank 0 returns every rank's figures, the others None."""
    missing = [name for name in CONTRACT if name not in os.environ]
    if missing:
        raise RuntimeError(f"not started by a launcher: {', '.join(missing)} unset (torchrun's environment)")
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    progress = progress or Progress(rank, os.getpid())
    config = TrainConfig(**{**job["config"], "model_config": dict(job["config"]["model_config"])})
    if job["backend"] == "nccl":
        config = TrainConfig(**{**config.to_dict(), "device": f"cuda:{local_rank}"})
        torch.cuda.set_device(local_rank)  # before the group starts: nccl's communicator takes the current device
    with waiting(progress, "the process group's start"):
        dist.init_process_group(job["backend"], timeout=timedelta(seconds=INIT_TIMEOUT_S))
    try:
        session = DataParallelSession(factory or _factory(config.model), config, rank, progress)
        with _gpu_monitor(session) as monitor:
            measured = _measure(session, int(job["steps"]), int(job["warmup"]), rank)
        gpu = monitor.report.to_dict() if monitor is not None else NO_GPU
        figures = {**rank_environment(), **measured, "gpu": gpu}
        gathered: list[Any] = [None] * dist.get_world_size()
        with waiting(progress, "the gather of the figures"):
            dist.all_gather_object(gathered, figures)
        # No rank tears gloo down while another still talks to it: without this, a rank that
        # finishes first sometimes aborts in teardown ("terminate called without an active exception").
        del session
        gc.collect()  # DDP's reducer holds the process group: drop it before the group is destroyed
        with waiting(progress, "the last barrier"):
            dist.barrier()
        return {"ranks": gathered} if rank == 0 else None
    except Exception as exc:
        # Recorded before the group is torn down: tearing it down is what makes the other ranks'
        # collectives fail, and their errors must come after this one's.
        progress.failure = failure_of(rank, exc)
        raise
    finally:
        dist.destroy_process_group()


def _gpu_monitor(session: TrainSession) -> AbstractContextManager[GpuMonitor | None]:
    """NVML sampling of the rank's own GPU; on the CPU nothing (the figures say "no GPU")."""
    if session.device.type != "cuda":
        return contextlib.nullcontext()
    return GpuMonitor(session.device.index or 0)


def run_recorded(job: Mapping[str, Any], factory: ModelFactory | None, progress: Progress) -> JSONObject | None:
    """:func:`run_rank`, recording the rank's own error in ``progress`` the moment it raises."""
    try:
        return run_rank(job, factory, progress)
    except Exception as exc:
        progress.failure = progress.failure or failure_of(progress.rank, exc)
        raise


def _factory(model: str) -> ModelFactory:
    from gymbench.plugins import Plugins

    return cast("ModelFactory", Plugins().components["model"][model].item.factory)  # the models hook's contract


def _timed(session: DataParallelSession, step: Callable[[], Any], together: bool = True) -> float:
    if together:
        with waiting(session.progress, f"the barrier before step {session.steps_taken + 1}"):
            dist.barrier()  # every rank starts the step at once: the slowest then sets the pace
    session.synchronize()
    started = time.perf_counter()
    step()
    session.synchronize()
    return time.perf_counter() - started


def _measure(session: DataParallelSession, steps: int, warmup: int, rank: int) -> dict[str, object]:
    for _ in range(warmup):
        _timed(session, session.step)
    synced = [_timed(session, session.step) for _ in range(steps)]
    digest = session.parameter_digest()
    with_sync, without_sync = [], []
    for _ in range(steps):
        with_sync.append(_timed(session, session.step))
        with session.replica.no_sync():
            without_sync.append(_timed(session, session.step))
    return {
        "step_s": synced,
        "tokens_per_step": session.last_count.tokens,
        "samples_per_step": session.config.batch,
        "parameter_digest": digest,
        "paired_sync_s": with_sync,
        "paired_no_sync_s": without_sync,
        "gradient_bytes": session.gradient_elements() * 4,
        "allreduce_s": _bare_allreduce(session, steps),
        "reference_step_s": _reference(session, steps, warmup, rank),
    }


def _bare_allreduce(session: DataParallelSession, repeats: int) -> list[float]:
    buffer = torch.ones(session.gradient_elements(), dtype=torch.float32, device=session.device)

    def all_reduce() -> None:
        with waiting(session.progress, "a bare all-reduce"):
            dist.all_reduce(buffer)

    return [_timed(session, all_reduce) for _ in range(repeats + 1)][1:]


def _reference(session: DataParallelSession, steps: int, warmup: int, rank: int) -> list[float]:
    """Rank 0 alone, no DDP, the same per-rank batch: what one process does (``--dp 1``)."""
    with waiting(session.progress, "the barrier before the one-process reference"):
        dist.barrier()
    times: list[float] = []
    if rank == 0:
        session.through_replica = False
        times = [_timed(session, session.step, together=False) for _ in range(warmup + steps)][warmup:]
    with waiting(session.progress, "the barrier after the one-process reference (rank 0 alone)"):
        dist.barrier()
    return times


def main() -> int:
    """``torchrun ... -m gymbench.train.ddp JOB.json RESULT.json``: rank 0 writes the result.

    The rank publishes its heartbeat and, when it fails, its own error to the folder the driver
    names (:data:`RANK_FOLDER_ENV`); the driver says the error, so the rank prints one line, not a
    traceback.
    """
    job_path, result_path = sys.argv[1:3]
    progress = Progress(int(os.environ.get("RANK", "0")), os.getpid())
    folder = os.environ.get(RANK_FOLDER_ENV)
    publisher = FilePublisher(progress, folder).start() if folder else None
    status = 0
    try:
        job = read_json_file(job_path, "data-parallel job")
        factory = pickle.loads(Path(job["factory"]).read_bytes()) if "factory" in job else None  # noqa: S301 - the driver's own file
        result = run_recorded(job, factory, progress)
        if result is not None:
            write_json_atomic(result_path, result)
    except Exception:  # noqa: BLE001 - recorded in progress; the driver reports it in one line
        status = 1
        failure = progress.failure
        print(f"gymbench: error: {failure.line() if failure else 'rank failed'}", file=sys.stderr)
    if publisher is not None:
        publisher.stop()
    # The rank's work is done and its result is on disk. Interpreter finalization would now destroy
    # gloo's C++ objects, whose worker threads may still be joinable: under load that aborts the rank
    # ("terminate called without an active exception") and torchrun reports a failed job. Leave
    # without finalization instead, as the work it would tidy up is already complete.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


class RankActor:
    """A Ray actor holding one rank: the driver gives it torchrun's variables, then the job.

    It runs with two threads (``max_concurrency=2``), so that :meth:`heartbeat` answers while
    :meth:`run` works: the side channel by which the driver sees progress and the rank's own error.
    """

    def __init__(self) -> None:
        self.progress = Progress(-1, os.getpid())

    def address(self) -> tuple[str, int]:
        """This node's address and a free port, for rank 0 to be the rendezvous (MASTER_ADDR/PORT)."""
        import socket

        import ray

        with socket.socket() as probe:
            probe.bind(("", 0))
            return ray.util.get_node_ip_address(), probe.getsockname()[1]

    def run(self, job: Mapping[str, Any], environment: Mapping[str, str], factory: ModelFactory) -> Any:
        """The rank's figures (rank 0) or None; a failure comes back as ``{"failure": ...}``, not raised."""
        os.environ.update(environment)
        self.progress.rank = int(environment["RANK"])
        self.progress.worker = threading.get_ident()
        try:
            return run_recorded(job, factory, self.progress)
        except Exception:  # noqa: BLE001 - recorded in progress, which the driver reads
            return {"failure": self.progress.snapshot()["failure"]}

    def heartbeat(self) -> dict[str, Any]:
        return self.progress.snapshot()


if __name__ == "__main__":
    sys.exit(main())
