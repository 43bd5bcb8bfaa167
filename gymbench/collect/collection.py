"""What a collection is made of: its settings and strategy, its run's identity, its standard metrics.

:class:`gymbench.collect.driver.Collection` drives one from these, the same way for
``gymbench collect``, a shard of a sharded collect and the pytest API.
"""

from __future__ import annotations

import dataclasses
import os
import random
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from gymbench.collect.config import CollectConfig
from gymbench.collect.target import NEMO_GYM_BACKEND
from gymbench.console import warn
from gymbench.errors import GymbenchError
from gymbench.jsonio import check_writable_file
from gymbench.plugins import Plugins
from gymbench.record import BenchmarkResult, Metric
from gymbench.rollout.dataset import input_identity
from gymbench.rollout.engine import CollectSettings
from gymbench.rollout.identity import check_run_fingerprint, write_run_fingerprint
from gymbench.rollout.run_settings import RunPolicy
from gymbench.rollout.stats import CollectStats, CollectSummary
from gymbench.settings import known_fields, run_defining_settings
from gymbench.types import ConcurrencyStrategy

T = TypeVar("T")
STORED_LATENCY_SAMPLES = 2000
UNBOUNDED_WARNING = (
    "num_samples_in_parallel is unset: every task is dispatched at once (NeMo Gym's default). "
    "Set +num_samples_in_parallel=N, or find N with `gymbench tune`"
)


def make_strategy(plugins: Plugins, name: str, options: dict[str, Any], parallelism: int | None) -> ConcurrencyStrategy:
    """A strategy from the registry; ``num_samples_in_parallel`` goes to those that take it (unless
    their own options set it). The strategy gets its checked settings object, not plain data."""
    settings: Any = plugins.check("strategy", name, options)
    takes_parallelism = isinstance(settings, Mapping) or "num_samples_in_parallel" in known_fields(type(settings))
    if takes_parallelism and "num_samples_in_parallel" not in options:
        if isinstance(settings, Mapping):
            settings = {**settings, "num_samples_in_parallel": parallelism}
        else:
            settings = dataclasses.replace(settings, num_samples_in_parallel=parallelism)
    elif not takes_parallelism and parallelism is not None:
        warn(f"num_samples_in_parallel does not apply to strategy {name!r}, which sets its own limit")
    return plugins.strategy(name, settings)


AGENT_REF = b'"agent_ref"'


def routed_to_agents(config: CollectConfig) -> CollectConfig:
    """``config``, sent to NeMo Gym's head server when nothing names a server and the rows name
    their agents: NeMo Gym routes a row with an ``agent_ref`` to its agent, so such a row is never
    the simulator's to answer (it was: the run exited 0 with rows that looked like the agent's). The
    head server is NeMo Gym's default (127.0.0.1:11000) unless ``+head_server`` says otherwise; one
    that does not answer is one line and a non-zero exit. A piped input is not read ahead."""
    if not config.chosen_backend()[1] or not config.input_jsonl_fpath:
        return config
    path = Path(config.input_jsonl_fpath)
    first = _first_agent_task(path, config)
    if first is None:
        return config
    from gymbench.builtin.backend_settings import DEFAULT_HEAD_SERVER

    host, port = DEFAULT_HEAD_SERVER["host"], DEFAULT_HEAD_SERVER["port"]
    warn(
        f"{path}: the tasks name NeMo Gym agents (agent_ref, task {first} first), so they go to their agents "
        f"through the head server at {host}:{port}, as NeMo Gym routes them (+head_server.host/.port for another)"
    )
    return dataclasses.replace(config, head_server=dict(DEFAULT_HEAD_SERVER))


def _first_agent_task(path: Path, config: CollectConfig) -> int | None:
    """The index of the first selected task with an ``agent_ref``, through the tasks' own reader,
    for a regular file that mentions ``agent_ref`` at all (a byte search first: most inputs do not)."""
    import mmap

    from gymbench.rollout.dataset import read_tasks

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or a device: opening it would take the run's writer
            return None
        with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if data.find(AGENT_REF) < 0:
                return None
    except (OSError, ValueError):  # missing, a name too long, empty: the run's own reader says what is wrong
        return None
    for task in read_tasks(path, config.task_slice()):
        if task.row.get("agent_ref"):
            return task.task_index
    return None


def collect_settings(config: CollectConfig) -> CollectSettings:
    if not config.input_jsonl_fpath:
        raise GymbenchError("collect needs +input_jsonl_fpath=TASKS.jsonl")
    if not config.output_jsonl_fpath:
        raise GymbenchError("collect needs +output_jsonl_fpath=ROLLOUTS.jsonl")
    policy = {name: getattr(config, name) for name in RunPolicy.__dataclass_fields__}
    return CollectSettings(
        input_path=Path(config.input_jsonl_fpath),
        output_path=Path(config.output_jsonl_fpath),
        selection=config.task_slice(),
        overrides=dict(config.responses_create_params),
        verify=config.verify_settings(),
        row_defaults={"agent_ref": {"name": config.agent_name}} if config.agent_name else {},
        failures_apart=config.failures_sidecar
        and not config.sharded
        and config.chosen_backend()[0] == NEMO_GYM_BACKEND,
        **policy,
    )


def metrics_path(output: Path) -> Path:
    return output.with_name(output.name + ".metrics.json")


class EndOfRunFiles:
    """The files written after a run's summary (NeMo Gym's aggregate metrics, the results record,
    ``OUT.metrics.json``), each on its own: a full disk (or a results directory gone) at the end
    costs that file, said in one line, never the rest of the end of the run."""

    def __init__(self) -> None:
        self.unwritten: list[str] = []

    def write(self, what: str, write: Callable[[], T]) -> T | None:
        try:
            return write()
        except GymbenchError as exc:
            self.unwritten.append(f"{what} ({exc})")
            return None

    def status(self, output: Path, status: int) -> int:
        """``status``, or 1 (after one line naming them) when a file was not written."""
        if not self.unwritten:
            return status
        import sys

        print(
            f"gymbench: error: not written: {'; '.join(self.unwritten)}. The rollouts in {output} are kept; free "
            "space (or fix the path), then run the same command with +resume=true to write them",
            file=sys.stderr,
        )
        return max(status, 1)


def check_metrics_path(path: Path) -> None:
    check_writable_file(path, "run's metrics file", "+output_jsonl_fpath (or move it away)")


def run_identity(config: CollectConfig, settings: CollectSettings, regular_input: bool) -> dict[str, Any]:
    """What defines the rows of a run: the tasks selected (by content) and every setting that changes rows.

    The settings are those not declared ``doc(..., run_neutral=True)`` (:func:`run_defining_settings`),
    so a setting added later is in the fingerprint unless its declaration says it changes no row.
    """
    identity = input_identity(settings.input_path, settings.selection) if regular_input else {"kind": "pipe"}
    return {
        "input": {key: identity[key] for key in ("rows", "blake2b", "kind") if key in identity},
        "settings": run_defining_settings(config),
    }


def check_run_identity(config: CollectConfig, settings: CollectSettings, regular_input: bool) -> None:
    """A resume must continue the same run: refuse (or, forced, warn about) a different one."""
    identity = run_identity(config, settings, regular_input)
    if settings.resume:
        for message in check_run_fingerprint(settings.output_path, identity, config.resume_force):
            warn(message)
    else:
        write_run_fingerprint(settings.output_path, identity)


def server_timing_metrics(summary: CollectSummary) -> dict[str, Metric]:
    """The server's median prompt time and the share of TTFT spent before it, as metrics a gate can
    hold (only when the server reported timings and the run streamed)."""
    figures = summary.get("server_timings", {}).get("ttft_vs_prompt")
    if not figures:
        return {}
    found = {}
    prompt, share = figures["prompt_s"]["p50"], figures["share"]["p50"]
    if prompt is not None:
        found["server_prompt_p50"] = Metric(prompt, "s", "lower")
    if share is not None:
        found["ttft_before_prompt_share_p50"] = Metric(share, "ratio", "lower")
    return found


def collect_result(
    config: CollectConfig,
    backend_name: str,
    stats: CollectStats,
    client_cpu_s: float | None = None,
    summary: CollectSummary | None = None,
) -> BenchmarkResult:
    """The standard collection metrics, named, with units and directions (the CLI's record and the
    pytest fixture record the same ones)."""
    summary = summary if summary is not None else stats.summary()
    latencies = stats.latency.values
    if len(latencies) > STORED_LATENCY_SAMPLES:
        latencies = random.Random(0).sample(latencies, STORED_LATENCY_SAMPLES)
    metrics = {
        "rollouts_per_s": Metric(summary["rollouts_per_s"], "rollouts/s", "higher"),
        "output_tokens_per_s": Metric(summary["output_tokens_per_s"], "tokens/s", "higher"),
        "failed": Metric(float(stats.failed), "rollouts", "lower"),
    }
    attempted = stats.completed + stats.failed
    metrics["error_rate"] = Metric(stats.failed / attempted if attempted else 0.0, "ratio", "lower")
    if latencies:
        metrics["latency"] = Metric.from_samples(latencies, "s", "lower")
        for name, value in summary["latency_s"].items():
            if value is not None:  # always, with latencies
                metrics[f"latency_{name}"] = Metric(value, "s", "lower")
    if client_cpu_s is not None and attempted:
        metrics["client_cpu_per_rollout"] = Metric(client_cpu_s / attempted, "s", "lower")
    for stage, value in summary["stage_mean_s"].items():
        if value is not None:
            metrics[f"stage_{stage}"] = Metric(value, "s", "lower")
    if stats.mean_reward is not None:
        metrics["mean_reward"] = Metric(stats.mean_reward, "reward", "higher")
    goodput = summary["goodput"]
    if goodput is not None and goodput["share"] is not None:
        metrics["goodput"] = Metric(goodput["share"], "ratio", "higher")
    metrics.update(server_timing_metrics(summary))
    replicas = summary.get("replicas")
    if replicas is not None and replicas["imbalance"] is not None:
        metrics["replica_imbalance"] = Metric(replicas["imbalance"], "ratio", "lower")
    return BenchmarkResult(
        name="collect",
        params={
            "input": Path(config.input_jsonl_fpath or "").name,
            "backend": backend_name,
            "num_samples_in_parallel": config.num_samples_in_parallel,
            "strategy": config.strategy,
        },
        metrics=metrics,
        extra={"summary": summary},
    )
