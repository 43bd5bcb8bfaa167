"""OOM backoff on a real device: trials in capped subprocesses on the CPU, in-process on CUDA.

CPU trials each get a fresh process whose address space is limited to its own baseline plus the
budget (``RLIMIT_AS``), under the allocator settings of an ordinary process unless asked otherwise;
CUDA trials share the process under ``torch.cuda.set_per_process_memory_fraction`` and release the
cache between trials. Either way a trial runs every sequence at the longest length the run may meet
(:func:`~gymbench.train.config.worst_case`): a batch that fits the mean length fails on the
first long batch.
"""

from __future__ import annotations

import gc
import time
from dataclasses import replace

import torch

from gymbench.jsonio import object_list
from gymbench.train.config import TrainConfig, trial_config, worst_case
from gymbench.train.oom import SearchPlan, SearchResult, Trial, TryBatch, attempt, halving_sizes
from gymbench.train.oom import largest_batch_that_fits as search
from gymbench.train.session import ModelFactory, TrainSession, resolve_device
from gymbench.train.worker import ALLOCATOR_WORDS, WorkerJob, run_job, trial_from_dict

CUDA_WORDS = "the CUDA caching allocator under set_per_process_memory_fraction"


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
) -> SearchResult:
    """Search on the configured device; on CUDA ``memory_fraction`` of the GPU is the cap."""
    device = resolve_device(config.device)
    if device.type != "cuda":
        result = search(cpu_trials(factory, config, plan.budget_bytes, steps, allocator), plan, progress)
        result.allocator = ALLOCATOR_WORDS[allocator]
        return result
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(memory_fraction, device)
    try:
        cuda_plan = replace(plan, budget_bytes=int(total * memory_fraction))
        result = search(cuda_trials(factory, config, steps), cuda_plan, progress)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
    result.allocator = CUDA_WORDS
    return result


def halve_until_it_fits(
    factory: ModelFactory,
    config: TrainConfig,
    budget_bytes: int,
    *,
    steps: int = 2,
    memory_fraction: float = 0.9,
    allocator: str = "default",
) -> list[Trial]:
    """NeMo RL's guide's handler, for comparison: start at ``config.batch``, halve on OOM, one process."""
    device = resolve_device(config.device)
    if device.type != "cuda":
        start = trial_config(worst_case(config), config.batch)
        job = WorkerJob("halve", factory, start, budget_bytes, steps, "halve", allocator)
        return [trial_from_dict(trial) for trial in object_list(run_job(job)["trials"], "the halve job's trials")]
    torch.cuda.set_per_process_memory_fraction(memory_fraction, device)
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
