"""OOM backoff on a real device: trials in capped subprocesses on the CPU, in-process on CUDA.

CPU trials each get a fresh process whose address space is limited to its own baseline plus the
budget (``RLIMIT_AS``), under the allocator settings of an ordinary process unless asked otherwise;
CUDA trials share the process under ``torch.cuda.set_per_process_memory_fraction`` and release the
cache between trials (the summary says so: they are not fresh processes). The CUDA cap counts what
the caching allocator cannot see: the CUDA context, NCCL's buffers and other processes (read with
``torch.cuda.mem_get_info``), and the share a colocated inference engine will take (NeMo RL's
``gpu_memory_utilization``). Either way a trial runs every sequence at the longest length the run may meet
(:func:`~gymbench.train.config.worst_case`): a batch that fits the mean length fails on the
first long batch.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, replace

import torch

from gymbench.errors import GymbenchError
from gymbench.jsonio import object_list
from gymbench.train.config import TrainConfig, trial_config, worst_case
from gymbench.train.oom import SearchPlan, SearchResult, Trial, TryBatch, attempt, halving_sizes
from gymbench.train.oom import largest_batch_that_fits as search
from gymbench.train.session import ModelFactory, TrainSession, resolve_device
from gymbench.train.worker import ALLOCATOR_WORDS, WorkerJob, run_job, trial_from_dict

CUDA_WORDS = "the CUDA caching allocator under set_per_process_memory_fraction"
CUDA_VERIFIED_IN = "this process (CUDA trials share it; the allocator's cache is emptied between them)"
GiB = 1 << 30


@dataclass(frozen=True)
class CudaBudget:
    """What the training process's allocator may hold on its GPU, and what was taken off first."""

    total: int
    outside: int
    """In use outside this process's caching allocator: the CUDA context, NCCL, other processes."""
    colocated: int
    """Kept for a colocated inference engine that is not running yet."""
    allowed: int

    @property
    def fraction(self) -> float:
        return self.allowed / self.total

    def words(self) -> str:
        return (
            f"{self.allowed / GiB:.2f} GiB for the allocator: memory_fraction of {self.total / GiB:.2f} GiB, less "
            f"{self.outside / GiB:.2f} GiB in use outside it (CUDA context, NCCL, other processes) and "
            f"{self.colocated / GiB:.2f} GiB for a colocated engine"
        )


def cuda_budget(device: torch.device, memory_fraction: float, colocated_share: float) -> CudaBudget:
    """``set_per_process_memory_fraction`` caps only the caching allocator: whatever else holds the
    GPU must come off the cap, or trials fit that the real run (with its engine) cannot."""
    free, total = torch.cuda.mem_get_info(device)
    outside = max(0, total - free - torch.cuda.memory_reserved(device))
    colocated = int(total * colocated_share)
    allowed = int(total * memory_fraction) - outside - colocated
    budget = CudaBudget(total, outside, colocated, allowed)
    if allowed <= 0:
        raise GymbenchError(
            f"no GPU memory left to search in: {budget.words()}; raise +memory_fraction, lower +colocated_share "
            "or free the GPU"
        )
    return budget


def cpu_trials(
    factory: ModelFactory, config: TrainConfig, budget_bytes: int, steps: int, allocator: str = "default"
) -> TryBatch:
    config = worst_case(config)

    def try_batch(batch: int, purpose: str) -> Trial:
        job = WorkerJob("trial", factory, trial_config(config, batch), budget_bytes, steps, purpose, allocator)
        return trial_from_dict(run_job(job))

    return try_batch


def cuda_trials(factory: ModelFactory, config: TrainConfig, steps: int) -> TryBatch:
    config = worst_case(config)
    device = resolve_device(config.device)

    def try_batch(batch: int, purpose: str) -> Trial:
        holder: list[TrainSession] = []
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        started = time.perf_counter()

        def work() -> None:
            holder.append(TrainSession(factory, trial_config(config, batch)))
            for _ in range(steps):
                holder[0].step()

        error = attempt(work, release=lambda: None)
        holder.clear()
        gc.collect()
        torch.cuda.empty_cache()
        used = torch.cuda.max_memory_reserved(device)
        return Trial(batch, error is None, used, time.perf_counter() - started, error, purpose)

    return try_batch


def find_largest_batch(
    factory: ModelFactory,
    config: TrainConfig,
    plan: SearchPlan,
    *,
    steps: int = 2,
    memory_fraction: float = 0.9,
    progress: bool = False,
    allocator: str = "default",
    colocated_share: float = 0.0,
) -> SearchResult:
    """Search on the configured device; on CUDA the cap is :func:`cuda_budget`'s."""
    device = resolve_device(config.device)
    if device.type != "cuda":
        result = search(cpu_trials(factory, config, plan.budget_bytes, steps, allocator), plan, progress)
        result.allocator = ALLOCATOR_WORDS[allocator]
        return result
    budget = cuda_budget(device, memory_fraction, colocated_share)
    torch.cuda.set_per_process_memory_fraction(budget.fraction, device)
    try:
        cuda_plan = replace(plan, budget_bytes=budget.allowed)
        result = search(cuda_trials(factory, config, steps), cuda_plan, progress)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
    result.allocator = f"{CUDA_WORDS} ({budget.words()})"
    result.verified_in = CUDA_VERIFIED_IN
    return result


def halve_until_it_fits(
    factory: ModelFactory,
    config: TrainConfig,
    budget_bytes: int,
    *,
    steps: int = 2,
    memory_fraction: float = 0.9,
    allocator: str = "default",
    colocated_share: float = 0.0,
) -> list[Trial]:
    """NeMo RL's guide's handler, for comparison: start at ``config.batch``, halve on OOM, one process."""
    device = resolve_device(config.device)
    if device.type != "cuda":
        start = trial_config(worst_case(config), config.batch)
        job = WorkerJob("halve", factory, start, budget_bytes, steps, "halve", allocator)
        return [trial_from_dict(trial) for trial in object_list(run_job(job)["trials"], "the halve job's trials")]
    budget = cuda_budget(device, memory_fraction, colocated_share)
    torch.cuda.set_per_process_memory_fraction(budget.fraction, device)
    try:
        try_batch = cuda_trials(factory, config, steps)
        trials = []
        for batch in halving_sizes(config.batch):
            trials.append(try_batch(batch, "halve"))
            if trials[-1].fits:
                break
        return trials
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
