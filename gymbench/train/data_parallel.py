"""``gymbench train --dp N --launcher torchrun|ray``: start the ranks, then read their figures.

Both launchers start the same rank code (:mod:`gymbench.train.ddp`) with torchrun's
environment contract: ``torchrun --standalone`` on this machine, or one plain Ray actor per rank
(the driver learns rank 0's address and a free port from it, then gives every actor ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ... ). Each rank gets ``batch / dp`` samples and a fixed
number of CPU threads, said in the record, because Ray starts workers with
``OMP_NUM_THREADS=1`` and torchrun does the same when it is unset.

The figures: step time (the slowest rank sets it), tokens/s overall and per rank, the exposed
all-reduce share (a synced step against an unsynced one, paired), a bare all-reduce of the
gradient's size, and scaling efficiency against one process doing its rank's share alone.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gymbench.errors import GymbenchError
from gymbench.jsonio import read_json_file, write_json_atomic
from gymbench.measure import Recorder
from gymbench.train.config import TrainConfig
from gymbench.types import JSONObject

if TYPE_CHECKING:
    from gymbench.train.session import ModelFactory

RAY_HINT = "--launcher ray needs Ray: pip install 'gymbench[ray]' (core ray only), or use --launcher torchrun"
TIMEOUT_S = 1800


def rank_config(config: TrainConfig, dp: int, threads: int, backend: str) -> TrainConfig:
    """One rank's share: ``batch / dp`` samples at the learning rate of the global batch
    (gradients are averaged over the ranks, as over one big batch)."""
    device = "cuda" if backend == "nccl" else "cpu"
    return replace(config, batch=config.batch // dp, lr=config.effective_lr, base_batch=None, threads=threads,
                   device=device)  # fmt: skip


def threads_per_rank(dp: int, asked: int | None) -> int:
    return asked or max(1, (os.cpu_count() or 1) // dp)


def launch(job: dict[str, Any], dp: int, launcher: str, factory: ModelFactory, ray_address: str | None) -> JSONObject:
    if launcher == "ray":
        return _launch_ray(job, dp, factory, ray_address)
    return _launch_torchrun(job, dp)


def _launch_torchrun(job: dict[str, Any], dp: int) -> JSONObject:
    with tempfile.TemporaryDirectory(prefix="gymbench-dp-") as scratch:
        job_path, result_path = Path(scratch) / "job.json", Path(scratch) / "result.json"
        write_json_atomic(job_path, job)
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={dp}",
                   "-m", "gymbench.train.ddp", str(job_path), str(result_path)]  # fmt: skip
        environment = {**os.environ, "OMP_NUM_THREADS": str(job["config"]["threads"])}
        done = subprocess.run(command, env=environment, capture_output=True, timeout=TIMEOUT_S, check=False)
        if done.returncode != 0 or not result_path.exists():
            status = done.returncode
            raise GymbenchError(f"torchrun with {dp} ranks failed (exit status {status}): {_last_error(done)}")
        return read_json_file(result_path, "data-parallel result")


def _last_error(done: subprocess.CompletedProcess[bytes]) -> str:
    """The ranks' own last error, not torchrun's wrapper around it (``ChildFailedError``)."""
    text = done.stderr.decode(errors="replace").splitlines()
    lines = [line for line in text if ("Error" in line or "terminate called" in line) and "ChildFailed" not in line]
    return lines[-1].strip() if lines else "no error message from the ranks"


def _launch_ray(job: dict[str, Any], dp: int, factory: ModelFactory, address: str | None) -> JSONObject:
    try:
        import ray
    except ImportError:
        raise GymbenchError(RAY_HINT) from None
    from gymbench.train.ddp import RankActor

    threads = int(job["config"]["threads"])
    started_here = not ray.is_initialized()
    if started_here:
        options: dict[str, Any] = {"address": "local", "num_cpus": dp * threads, "include_dashboard": False}
        quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
        ray.init(**(options if address is None else {"address": address}), **quiet)
    try:
        gpus = 1 if job["backend"] == "nccl" else 0
        environment = {"OMP_NUM_THREADS": str(threads)}
        actor = ray.remote(num_cpus=threads, num_gpus=gpus, runtime_env={"env_vars": environment})(RankActor)
        ranks: list[Any] = [actor.remote() for _ in range(dp)]
        host, port = ray.get(ranks[0].address.remote())
        contract = {"WORLD_SIZE": str(dp), "MASTER_ADDR": host, "MASTER_PORT": str(port), **environment}
        runs = [rank.run.remote(job, {**contract, "RANK": str(i), "LOCAL_RANK": "0"}, factory) for i, rank in
                enumerate(ranks)]  # fmt: skip
        return ray.get(runs, timeout=TIMEOUT_S)[0]
    finally:
        if started_here:
            ray.shutdown()


def summarise(ranks: Sequence[Mapping[str, Any]]) -> JSONObject:
    """The job's figures from every rank's: per step, the slowest rank sets the time."""
    step_s = np.max([rank["step_s"] for rank in ranks], axis=0)
    tokens = sum(rank["tokens_per_step"] for rank in ranks)
    synced = np.max([rank["paired_sync_s"] for rank in ranks], axis=0)
    unsynced = np.max([rank["paired_no_sync_s"] for rank in ranks], axis=0)
    reference = np.asarray(ranks[0]["reference_step_s"])
    reference_tokens_per_s = ranks[0]["tokens_per_step"] / float(np.median(reference))
    overall = tokens / step_s
    allreduce = np.max([rank["allreduce_s"] for rank in ranks], axis=0)
    return {
        "step_s": step_s.tolist(),
        "tokens_per_s": overall.tolist(),
        "tokens_per_s_per_rank": [rank["tokens_per_step"] / float(np.median(rank["step_s"])) for rank in ranks],
        "allreduce_exposed_share": ((synced - unsynced) / synced).tolist(),
        "allreduce_s": allreduce.tolist(),
        "gradient_bytes": ranks[0]["gradient_bytes"],
        "reference_step_s": reference.tolist(),
        "scaling_efficiency": float(np.median(overall)) / (len(ranks) * reference_tokens_per_s),
        "replicas_identical": len({rank["parameter_digest"] for rank in ranks}) == 1,
    }


def record(
    recorder: Recorder, figures: Mapping[str, Any], ranks: Sequence[Mapping[str, Any]], setup: Mapping[str, Any]
) -> None:
    recorder.record("step_time", figures["step_s"], "s", "lower")
    recorder.record("tokens_per_s", figures["tokens_per_s"], "tokens/s", "higher")
    recorder.record("tokens_per_s_per_rank", figures["tokens_per_s_per_rank"], "tokens/s", "higher")
    recorder.record("allreduce_exposed_share", figures["allreduce_exposed_share"], "ratio", "lower")
    recorder.record("allreduce_time", figures["allreduce_s"], "s", "lower")
    recorder.record("scaling_efficiency", figures["scaling_efficiency"], "ratio", "higher")
    recorder.record("reference_step_time", figures["reference_step_s"], "s", "lower")
    environments = [{key: rank[key] for key in ("rank", "host", "pid", "nice", "omp_num_threads", "torch_threads")}
                    for rank in ranks]  # fmt: skip
    recorder.extra.update(
        data_parallel={
            **setup,
            "replicas_identical": figures["replicas_identical"],
            "gradient_bytes": figures["gradient_bytes"],
            "ranks": environments,
        }  # fmt: skip
    )


def summary_lines(figures: dict[str, Any], setup: dict[str, Any]) -> list[str]:
    median = float(np.median(figures["step_s"]))
    share = float(np.median(figures["allreduce_exposed_share"]))
    allreduce = float(np.median(figures["allreduce_s"]))
    bandwidth = figures["gradient_bytes"] / allreduce / 1e9 if allreduce > 0 else float("nan")
    per_rank = ", ".join(f"{value:.0f}" for value in figures["tokens_per_s_per_rank"])
    return [
        f"data parallel {setup['dp']} ranks ({setup['launcher']}, {setup['dist_backend']}), "
        f"{setup['threads_per_rank']} threads and {setup['batch_per_rank']} samples per rank",
        f"step time  {median * 1e3:.1f} ms (median of {len(figures['step_s'])}; the slowest rank per step)",
        f"tokens/s   {float(np.median(figures['tokens_per_s'])):.0f} overall; per rank {per_rank}",
        f"all-reduce exposed {share:.1%} of a step; bare all-reduce of {figures['gradient_bytes'] / 2**20:.1f} MiB "
        f"{allreduce * 1e3:.2f} ms ({bandwidth:.2f} GB/s)",
        f"scaling efficiency {figures['scaling_efficiency']:.2f} against one process on its rank's share "
        f"({float(np.median(figures['reference_step_s'])) * 1e3:.1f} ms/step)",
        "replicas   " + ("bit-identical after synced steps" if figures["replicas_identical"] else "DIFFER (a bug)"),
    ]
