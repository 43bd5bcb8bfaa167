"""``gymbench train --dp N --launcher torchrun|ray``: start the ranks, then read their figures.

Both launchers start the same rank code (:mod:`gymbench.train.ddp`) with torchrun's
environment contract: ``torchrun --standalone`` on this machine, or one plain Ray actor per rank
(the driver learns rank 0's address and a free port from it, then gives every actor ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ... ). Each rank gets ``batch / dp`` samples and a fixed
number of CPU threads, said in the record, because Ray starts workers with
``OMP_NUM_THREADS=1`` and torchrun does the same when it is unset.

A rank that fails is named with its own error, and a rank that hangs is named within
``rank_hang_s`` seconds (:mod:`gymbench.train.rank_watch`): the driver watches the ranks'
heartbeats while they run and stops the others at once.

The figures: step time (the slowest rank sets it), tokens/s overall and per rank, the exposed
all-reduce share (a synced step against an unsynced one, paired), a bare all-reduce of the
gradient's size, and scaling efficiency against one process doing its rank's share alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gymbench.errors import GymbenchError
from gymbench.jsonio import read_json_file, write_json_atomic
from gymbench.measure import Recorder
from gymbench.train.config import TrainConfig
from gymbench.train.rank_watch import BEAT_INTERVAL_S, RankWatch, read_folder
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


def launch(
    job: dict[str, Any], dp: int, launcher: str, factory: ModelFactory, ray_address: str | None, hang_s: float
) -> JSONObject:
    if launcher == "ray":
        return _launch_ray(job, dp, factory, ray_address, hang_s)
    return _launch_torchrun(job, dp, factory, hang_s)


def _launch_torchrun(job: dict[str, Any], dp: int, factory: ModelFactory, hang_s: float) -> JSONObject:
    """The ranks get the driver's model factory pickled, as Ray's actors do: a model a plugin
    registered at run time (a pytest plugin) is then the model every rank builds."""
    from gymbench.train.ddp import RANK_FOLDER_ENV

    with tempfile.TemporaryDirectory(prefix="gymbench-dp-") as scratch:
        job_path, result_path = Path(scratch) / "job.json", Path(scratch) / "result.json"
        folder, log_path = Path(scratch) / "ranks", Path(scratch) / "torchrun.log"
        folder.mkdir()
        factory_path = Path(scratch) / "factory.pickle"
        factory_path.write_bytes(pickle.dumps(factory))
        write_json_atomic(job_path, {**job, "factory": str(factory_path)})
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={dp}",
                   "-m", "gymbench.train.ddp", str(job_path), str(result_path)]  # fmt: skip
        environment = {**os.environ, "OMP_NUM_THREADS": str(job["config"]["threads"]), RANK_FOLDER_ENV: str(folder)}
        with log_path.open("wb") as log:
            ranks = subprocess.Popen(command, env=environment, stdout=log, stderr=log, start_new_session=True)
            try:
                status = _watch_torchrun(ranks, str(folder), dp, hang_s)
            finally:
                _stop(ranks)
        if status != 0 or not result_path.exists():
            done = subprocess.CompletedProcess(command, status, b"", log_path.read_bytes())
            raise GymbenchError(f"torchrun with {dp} ranks failed (exit status {status}): {_last_error(done)}")
        return read_json_file(result_path, "data-parallel result")


def _watch_torchrun(ranks: subprocess.Popen[bytes], folder: str, dp: int, hang_s: float) -> int:
    """Poll the ranks' heartbeats until torchrun exits; a rank's error or a hang ends the run at once."""
    watch, deadline = RankWatch(dp, hang_s), time.monotonic() + TIMEOUT_S
    while True:
        status = ranks.poll()
        watch.observe(read_folder(folder))
        _raise_on_trouble(watch, f"torchrun with {dp} ranks")
        if status is not None:
            return status
        if time.monotonic() > deadline:
            raise GymbenchError(f"torchrun with {dp} ranks did not finish in {TIMEOUT_S} s")
        time.sleep(BEAT_INTERVAL_S)


def _raise_on_trouble(watch: RankWatch, what: str) -> None:
    failure = watch.first_failure()
    if failure is not None:
        raise GymbenchError(f"{what}: {failure.line()}")
    hung = watch.hung()
    if hung is not None:
        raise GymbenchError(f"{what}: {hung}")


def _stop(ranks: subprocess.Popen[bytes]) -> None:
    """torchrun and its ranks (one process group of their own): TERM, then KILL after a grace."""
    for sent in (signal.SIGTERM, signal.SIGKILL):
        if ranks.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):  # ended between the poll and the signal
            os.killpg(ranks.pid, sent)
        try:
            ranks.wait(timeout=5)
        except subprocess.TimeoutExpired:
            continue


def _last_error(done: subprocess.CompletedProcess[bytes]) -> str:
    """The ranks' own last error, not torchrun's wrapper around it (``ChildFailedError``)."""
    text = done.stderr.decode(errors="replace").splitlines()
    lines = [line for line in text if ("Error" in line or "terminate called" in line) and "ChildFailed" not in line]
    return lines[-1].strip() if lines else "no error message from the ranks"


def _launch_ray(job: dict[str, Any], dp: int, factory: ModelFactory, address: str | None, hang_s: float) -> JSONObject:
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
    ranks: list[Any] = []
    try:
        gpus = 1 if job["backend"] == "nccl" else 0
        environment = {"OMP_NUM_THREADS": str(threads)}
        actor = ray.remote(RankActor).options(num_cpus=threads, num_gpus=gpus, max_concurrency=2,
                                              runtime_env={"env_vars": environment})  # fmt: skip
        ranks = [actor.remote() for _ in range(dp)]
        host, port = ray.get(ranks[0].address.remote())
        contract = {"WORLD_SIZE": str(dp), "MASTER_ADDR": host, "MASTER_PORT": str(port), **environment}
        runs = [rank.run.remote(job, {**contract, "RANK": str(i), "LOCAL_RANK": "0"}, factory) for i, rank in
                enumerate(ranks)]  # fmt: skip
        return _watch_ray(ray, ranks, runs, hang_s)
    finally:
        for rank in ranks:
            ray.kill(rank)
        if started_here:
            ray.shutdown()


def _watch_ray(ray: Any, ranks: list[Any], runs: list[Any], hang_s: float) -> JSONObject:
    """Wait for the ranks' runs, reading their heartbeats between waits (the actors answer while they run)."""
    what = f"Ray with {len(ranks)} ranks"
    watch, deadline = RankWatch(len(ranks), hang_s), time.monotonic() + TIMEOUT_S
    answers: dict[int, Any] = {}
    while len(answers) < len(runs):
        pending = [run for index, run in enumerate(runs) if index not in answers]
        done, _ = ray.wait(pending, num_returns=len(pending), timeout=BEAT_INTERVAL_S)
        for run in done:
            answers[runs.index(run)] = _ray_answer(ray, run, runs.index(run))
        watch.observe([snapshot for snapshot in _ray_heartbeats(ray, ranks) if snapshot is not None])
        watch.observe([answer for answer in answers.values() if isinstance(answer, dict) and "beat" in answer])
        _raise_on_trouble(watch, what)
        if time.monotonic() > deadline:
            raise GymbenchError(f"{what} did not finish in {TIMEOUT_S} s")
    return answers[0]


def _ray_answer(ray: Any, run: Any, index: int) -> Any:
    """A run's answer; a failure becomes a snapshot the watch reads, a dead actor one line."""
    try:
        answer = ray.get(run)
    except Exception as exc:  # noqa: BLE001 - Ray's errors for a dead actor or worker
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GymbenchError(f"Ray with rank {index}: its actor died ({type(exc).__name__}: {reason[:300]})") from None
    if isinstance(answer, dict) and "failure" in answer:
        beat = {"rank": index, "count": -1, "where": "failed", "waiting": False, "pid": 0}
        return {"beat": beat, "failure": answer["failure"]}
    return answer


def _ray_heartbeats(ray: Any, ranks: list[Any]) -> list[Any]:
    """Each actor's heartbeat, under the rank the driver gave it (an actor asked before its run
    began does not know its rank yet)."""
    calls = [rank.heartbeat.remote() for rank in ranks]
    snapshots: list[dict[str, Any] | None] = []
    for index, call in enumerate(calls):
        try:
            snapshot = ray.get(call, timeout=5)
        except Exception:  # noqa: BLE001 - a rank that cannot answer now is judged by its silence
            snapshots.append(None)
            continue
        snapshots.append({**snapshot, "beat": {**snapshot["beat"], "rank": index}})
    return snapshots


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
    keys = ("rank", "host", "pid", "nice", "omp_num_threads", "torch_threads", "gpu")
    environments = [{key: rank[key] for key in keys if key in rank} for rank in ranks]
    recorder.extra.update(
        data_parallel={
            **setup,
            "replicas_identical": figures["replicas_identical"],
            "gradient_bytes": figures["gradient_bytes"],
            "ranks": environments,
        }  # fmt: skip
    )


def summary_lines(figures: dict[str, Any], setup: dict[str, Any], ranks: Sequence[Mapping[str, Any]] = ()) -> list[str]:
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
        "gpu monitor " + "; ".join(f"rank {index}: {_gpu_text(rank.get('gpu'))}" for index, rank in enumerate(ranks)),
    ]


def _gpu_text(gpu: Mapping[str, Any] | None) -> str:
    if not gpu:
        return "not sampled"
    if "utilisation_median_pct" not in gpu:
        return f"not sampled ({gpu.get('reason') or 'no samples'})"
    used = gpu["memory_used_max_bytes"] / (1 << 20)
    return f"utilisation median {gpu['utilisation_median_pct']:.0f}%, memory used max {used:.0f} MiB"
