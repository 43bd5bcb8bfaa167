"""Runs a memory pass or an OOM trial in a fresh process: ``python -m gymbench.train.worker``.

Why a subprocess on the CPU: glibc reads its malloc thresholds at start-up (the memory pass needs
them fixed), and an out-of-memory trial needs a real limit (``RLIMIT_AS``) that must not fall on
the caller. Trials run under the allocator settings the user's training process will have (the
environment as inherited: ``default``) unless ``fixed`` asks for the memory pass's thresholds;
with glibc's default, dynamic mmap threshold a process holds more address space for the same
tensors, so a size found under fixed thresholds can fail in an ordinary process.

The job travels pickled on stdin, so a model factory must be picklable: a module-level function,
as the built-in ones are. The result comes back as JSON in a file named on the command
line (stdout belongs to the model code). On CUDA the same job functions run in-process, capped by
``torch.cuda.set_per_process_memory_fraction`` instead.
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gymbench.errors import GymbenchError
from gymbench.train.config import TrainConfig, trial_config
from gymbench.train.oom import Trial, attempt, halving_sizes
from gymbench.types import JSONObject

OOM_EXIT_TEXT = (
    "std::bad_alloc",
    "Cannot allocate memory",
    "can't allocate memory",
    "MemoryError",
    "could not create a primitive",  # oneDNN's allocation failure under the address-space cap
)


@dataclass(frozen=True)
class WorkerJob:
    kind: str
    """``memory``, ``trial`` or ``halve``."""
    factory: Callable[..., Any]
    config: TrainConfig
    budget_bytes: int = 0
    """For ``trial``/``halve``: address space allowed above the process's baseline."""
    steps: int = 2
    purpose: str = "search"
    allocator: str = "default"
    """``default``: the environment as inherited; ``fixed``: gymbench's malloc thresholds."""


ALLOCATOR_WORDS = {
    "default": "the default allocator settings a user's training process has (environment as inherited)",
    "fixed": "gymbench's fixed malloc thresholds (MALLOC_MMAP_THRESHOLD_=65536, MALLOC_TRIM_THRESHOLD_=131072); "
    "an ordinary process without them may need more",
}


# --------------------------------------------------------------------------- jobs (in the child)


def memory_job(job: WorkerJob) -> JSONObject:
    from gymbench.train.memory import measure_step_memory
    from gymbench.train.session import TrainSession

    return measure_step_memory(TrainSession(job.factory, job.config)).to_dict()


def _capped_session(job: WorkerJob) -> tuple[Any, int, int]:
    """A session warmed at batch 1 (optimizer state, thread pool), then the address-space cap."""
    from gymbench.train.memory import proc_status_bytes
    from gymbench.train.session import TrainSession

    session = TrainSession(job.factory, trial_config(job.config, 1))
    session.step()
    baseline = proc_status_bytes("VmSize")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (baseline + job.budget_bytes, hard))
    return session, baseline, proc_status_bytes("VmPeak")


def _try(session: Any, batch: int, steps: int, baseline: int, earlier_peak: int, purpose: str) -> Trial:
    """One capped attempt, with its own memory figures.

    Address space (what the cap counts): ``VmPeak`` cannot be reset, so it is this trial's own only
    when the trial set a new peak; otherwise 0 (unknown) and the search does not learn from it.
    Resident memory: ``VmHWM`` is reset before the trial, so its peak is always this trial's own.
    """
    from gymbench.train.memory import proc_status_bytes, reset_peak_rss

    session.config = trial_config(session.config, batch)
    rss_known = reset_peak_rss()
    rss_before = proc_status_bytes("VmRSS")
    started = time.perf_counter()
    error = attempt(lambda: [session.step() for _ in range(steps)])
    seconds = time.perf_counter() - started
    peak = proc_status_bytes("VmPeak")
    used = peak - baseline if peak > earlier_peak else 0
    rss = proc_status_bytes("VmHWM") - rss_before if rss_known else 0
    return Trial(batch, error is None, used, seconds, error, purpose, max(rss, 0))


def trial_job(job: WorkerJob) -> JSONObject:
    session, baseline, earlier_peak = _capped_session(job)
    return asdict(_try(session, job.config.batch, job.steps, baseline, earlier_peak, job.purpose))


def halve_job(job: WorkerJob) -> JSONObject:
    """NeMo RL's guide's in-process handler: one process, halve on OOM and retry."""
    from gymbench.train.memory import proc_status_bytes

    session, baseline, earlier_peak = _capped_session(job)
    trials = []
    for batch in halving_sizes(job.config.batch):
        trials.append(_try(session, batch, job.steps, baseline, earlier_peak, "halve"))
        earlier_peak = max(earlier_peak, proc_status_bytes("VmPeak"))
        if trials[-1].fits:
            break
    return {"trials": [asdict(trial) for trial in trials]}


JOBS = {"memory": memory_job, "trial": trial_job, "halve": halve_job}


def main() -> int:
    job = pickle.load(sys.stdin.buffer)
    Path(sys.argv[1]).write_text(json.dumps(JOBS[job.kind](job)))
    return 0


# --------------------------------------------------------------------------- parent side


def child_environment(job: WorkerJob) -> dict[str, str]:
    """The memory pass always fixes the malloc thresholds (it measures); trials only when asked."""
    from gymbench.train.memory import SHARP_MALLOC_ENV

    path = os.pathsep.join(entry for entry in sys.path if entry)
    fixed = job.kind == "memory" or job.allocator == "fixed"
    return {**os.environ, **(SHARP_MALLOC_ENV if fixed else {}), "PYTHONPATH": path}


def run_job(job: WorkerJob, timeout_s: float = 600.0) -> JSONObject:
    """Run ``job`` in a fresh interpreter; a child killed by the allocator reads as an OOM trial."""
    try:
        payload = pickle.dumps(job)
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise GymbenchError(
            f"model {job.config.model!r}: its factory cannot be sent to a subprocess ({exc}); the CPU "
            "memory pass and OOM search need a module-level factory function, not a lambda or closure"
        ) from None
    with tempfile.TemporaryDirectory(prefix="gymbench-worker-") as folder:
        out = Path(folder) / "result.json"
        try:
            done = subprocess.run(
                [sys.executable, "-m", "gymbench.train.worker", str(out)],
                input=payload,
                capture_output=True,
                env=child_environment(job),
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise GymbenchError(
                f"the {job.kind} subprocess for model {job.config.model!r} at batch {job.config.batch} ran "
                f"past {timeout_s:.0f} s and was killed; shrink the model or the batch range"
            ) from None
        if done.returncode == 0 and out.exists():
            return json.loads(out.read_text())
    return _failed_child(job, done)


def _failed_child(job: WorkerJob, done: subprocess.CompletedProcess[bytes]) -> JSONObject:
    stderr = done.stderr.decode(errors="replace")
    if job.kind == "trial" and any(text in stderr for text in OOM_EXIT_TEXT):
        line = next((ln for ln in stderr.splitlines() if any(t in ln for t in OOM_EXIT_TEXT)), "")
        return asdict(Trial(job.config.batch, False, 0, 0.0, f"child died: {line.strip()[:300]}", job.purpose))
    raise GymbenchError(
        f"the {job.kind} subprocess for model {job.config.model!r} failed with exit code "
        f"{done.returncode} and no out-of-memory error; its stderr ends:\n{stderr[-2000:]}"
    )


def trial_from_dict(data: Mapping[str, Any]) -> Trial:
    return Trial(**data)


if __name__ == "__main__":
    sys.exit(main())
