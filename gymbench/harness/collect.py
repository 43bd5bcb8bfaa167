"""``gymbench collect``: wire settings, plugins and (when no backend is named) the simulator.

With no backend configured the simulated server is started in its own process and used through
the ``openai`` backend, so the main job runs on a fresh machine with nothing else set up.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gymbench.errors import GymbenchError
from gymbench.harness.collect_config import CollectConfig, ServerConfig
from gymbench.harness.progress import collect_progress, warn
from gymbench.jsonio import write_json_atomic
from gymbench.plugins import Plugins
from gymbench.record import BenchmarkResult, Metric
from gymbench.rollout.dataset import TaskSlice, input_identity
from gymbench.rollout.engine import Collector, CollectSettings, preflight
from gymbench.rollout.identity import check_run_fingerprint, write_run_fingerprint
from gymbench.rollout.stats import CollectStats
from gymbench.run import Run
from gymbench.settings import settings_dict
from gymbench.types import ConcurrencyStrategy, GenerationFailed

SIM_MODEL = "gymbench-sim"
STORED_LATENCY_SAMPLES = 2000
UNBOUNDED_WARNING = (
    "num_samples_in_parallel is unset: every task is dispatched at once (NeMo Gym's default). "
    "Set +num_samples_in_parallel=N, or find N with `gymbench tune`"
)


@contextlib.contextmanager
def backend_settings(config: ServerConfig, plugins: Plugins) -> Iterator[tuple[str, dict[str, Any]]]:
    """The backend's name and settings; starts (and stops) the simulator when there is no server.

    A backend gets the server settings its schema declares, plus ``backend_options`` (checked
    against the schema: a misspelt option is an error). No backend: the simulator behind the
    ``openai`` backend. ``nemo-gym`` without ``agent_url``: the simulator's agent mode (``/run``).
    """
    name = config.backend or "openai"
    declared = plugins.options("backend", name)
    values = config.backend_values()
    settings = {key: value for key, value in values.items() if declared is None or key in declared}
    settings.update(config.backend_options)
    needs_sim = config.backend is None or (config.backend == "nemo-gym" and not config.agent_url)
    if not needs_sim:
        yield name, settings
        return
    from gymbench.sim import running_sim_server

    sim = {"model": config.model, **config.sim} if config.model else dict(config.sim)  # serve the model asked for
    with running_sim_server(preset=config.sim_preset, **sim) as server:
        warn(
            f"no server set: using the simulated server (preset {config.sim_preset}) at {server.url} "
            f"through the {name} backend; set +backend=openai +base_url=... +model=... "
            "(or +backend=nemo-gym +agent_url=...) for a real one"
        )
        sim_values = {"base_url": server.base_url, "agent_url": server.url, "model": config.model or SIM_MODEL}
        settings.update({k: v for k, v in sim_values.items() if declared is None or k in declared})
        yield name, settings


def make_strategy(plugins: Plugins, name: str, options: dict[str, Any], parallelism: int | None) -> ConcurrencyStrategy:
    """A strategy from the registry; ``num_samples_in_parallel`` goes to those that take it."""
    declared = plugins.options("strategy", name)
    config = dict(options)
    if declared is None or "num_samples_in_parallel" in declared:
        config.setdefault("num_samples_in_parallel", parallelism)
    elif parallelism is not None:
        warn(f"num_samples_in_parallel does not apply to strategy {name!r}, which sets its own limit")
    return plugins.strategy(name, config)


def collect_settings(config: CollectConfig) -> CollectSettings:
    if not config.input_jsonl_fpath:
        raise GymbenchError("collect needs +input_jsonl_fpath=TASKS.jsonl")
    if not config.output_jsonl_fpath:
        raise GymbenchError("collect needs +output_jsonl_fpath=ROLLOUTS.jsonl")
    selection = TaskSlice(config.start_idx, config.end_idx, config.limit, config.num_repeats)
    return CollectSettings(
        input_path=Path(config.input_jsonl_fpath),
        output_path=Path(config.output_jsonl_fpath),
        selection=selection,
        overrides=dict(config.responses_create_params),
        resume=config.resume,
        overwrite=config.overwrite,
        max_attempts=config.max_attempts,
        verify=config.verify_settings(),
        stop_after_failures=config.stop_after_failures,
    )


def metrics_path(output: Path) -> Path:
    return output.with_name(output.name + ".metrics.json")


def check_metrics_path(path: Path) -> None:
    if path.is_dir():
        raise GymbenchError(f"{path}: is a directory, but the run writes its metrics file there; move it away")


def run_identity(config: CollectConfig, settings: CollectSettings, regular_input: bool) -> dict[str, Any]:
    """What defines the rows of a run: the tasks selected (by content) and the settings that change rows.

    Where the server listens is left out (the embedded simulator gets a new port every run).
    """
    identity = input_identity(settings.input_path, settings.selection) if regular_input else {"kind": "pipe"}
    return {
        "input": {key: identity[key] for key in ("rows", "blake2b", "kind") if key in identity},
        "selection": {
            "start_idx": config.start_idx, "end_idx": config.end_idx, "limit": config.limit,
            "num_repeats": config.num_repeats,
        },
        "verifier": {"name": config.verifier, "options": config.verifier_options},
        "request": {
            "backend": config.backend, "model": config.model, "api": config.api, "agent_url": config.agent_url,
            "responses_create_params": config.responses_create_params, "extra_body": config.extra_body,
        },
    }  # fmt: skip


def check_run_identity(config: CollectConfig, settings: CollectSettings, regular_input: bool) -> None:
    """A resume must continue the same run: refuse (or, forced, warn about) a different one."""
    identity = run_identity(config, settings, regular_input)
    if settings.resume:
        for message in check_run_fingerprint(settings.output_path, identity, config.resume_force):
            warn(message)
    else:
        write_run_fingerprint(settings.output_path, identity)


def run_collect(config: CollectConfig, plugins: Plugins) -> int:
    settings = collect_settings(config)
    verifier = plugins.verifier(config.verifier, config.verifier_options)
    strategy = make_strategy(plugins, config.strategy, config.strategy_options, config.num_samples_in_parallel)
    if config.num_samples_in_parallel is None and config.strategy == "semaphore":
        warn(UNBOUNDED_WARNING)
    run = Run(plugins, "collect", config.run_name, settings_dict(config), results_dir=config.results_dir,
              save=config.save_results)  # fmt: skip
    tasks = preflight(settings)
    with contextlib.closing(tasks):
        check_metrics_path(metrics_path(settings.output_path))
        check_run_identity(config, settings, tasks.is_regular)
        run.start()
        with backend_settings(config, plugins) as (backend_name, backend_config):
            backend = plugins.backend(backend_name, backend_config)
            collector = Collector(settings, backend, verifier, strategy, tasks=tasks)
            stats, interrupted = _collect(collector, config.progress)
    summary = stats.summary()
    print(format_summary(summary, settings.output_path), file=sys.stderr)
    run.finish([collect_result(config, backend_name, stats)], save=config.save_results and not interrupted)
    write_json_atomic(metrics_path(settings.output_path), {"summary": summary, "settings": settings_dict(config)})
    if run.saved_path is not None:
        print(f"results record: {run.saved_path}", file=sys.stderr)
    return _exit_status(collector, stats, settings.output_path, interrupted)


def _exit_status(collector: Collector, stats: CollectStats, output: Path, interrupted: bool) -> int:
    """Say how the run ended; every rollout is either in ``output`` or will be redone by a resume."""
    problems = collector.problems
    resume = "Run the same command with +resume=true to continue."
    if interrupted:
        print(f"gymbench: interrupted; {stats.completed + stats.failed} rollouts are in {output}. {resume}",
              file=sys.stderr)  # fmt: skip
        return 130
    for error in problems.errors:
        print(f"gymbench: error: {error}", file=sys.stderr)
    if problems.errors:
        missing = ", ".join(f"{t}/{r}" for t, r in problems.unwritten[:10]) or "none"
        print(
            f"gymbench: error: the run stopped after an internal error; rollouts without a row (task/rollout): "
            f"{missing}{' ...' if len(problems.unwritten) > 10 else ''}. Fix the cause, then: {resume}",
            file=sys.stderr,
        )
        return 1
    if problems.stop_reason is not None:
        print(
            f"gymbench: error: stopped early: {problems.stop_reason}. {stats.completed + stats.failed} rollouts "
            f"are in {output}; the rest were not attempted. Check the server, then: {resume}",
            file=sys.stderr,
        )
        return 1
    return 0 if stats.failed == 0 else 1


def _collect(collector: Collector, show_progress: bool) -> tuple[CollectStats, bool]:
    """Run the engine on a fresh event loop (uvloop when installed) with a progress bar."""
    seen: set[tuple[str, int | None]] = set()

    def on_failure(failure: GenerationFailed) -> None:
        if (failure.kind, failure.status) not in seen:
            seen.add((failure.kind, failure.status))
            warn(f"a rollout failed ({failure.kind}): {failure.reason}; further failures of this kind are counted")

    async def main() -> CollectStats:
        collector.on_failure = on_failure
        with collect_progress(collector, enabled=show_progress) as on_progress:
            collector.on_progress = on_progress
            return await collector.run()

    try:
        return run_loop(main()), False
    except KeyboardInterrupt:
        return collector.stats, True


def run_loop(coroutine: Any) -> Any:
    with contextlib.suppress(ImportError):
        import uvloop

        return uvloop.run(coroutine)
    return asyncio.run(coroutine)


def format_summary(summary: dict[str, Any], output: Path) -> str:
    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.3g}s"

    latency = summary["latency_s"]
    stages = summary["stage_mean_s"]
    reward = summary["mean_reward"]
    kinds = ", ".join(f"{k}: {v}" for k, v in summary["failure_kinds"].items())
    cache = summary["verification_cache"]
    lines = [
        f"completed {summary['completed']}, failed {summary['failed']}"
        + (f" ({kinds})" if kinds else "")
        + f", skipped (already done) {summary['skipped_from_resume']}, retries {summary['retries']}",
        f"{summary['rollouts_per_s']:.2f} rollouts/s, {summary['output_tokens_per_s']:.1f} output tokens/s, "
        f"mean reward {'-' if reward is None else f'{reward:.3f}'}, {summary['elapsed_s']:.1f}s",
        f"latency p50 {seconds(latency['p50'])}  p90 {seconds(latency['p90'])}  p99 {seconds(latency['p99'])}",
        "stages (mean): " + "  ".join(f"{name} {seconds(value)}" for name, value in stages.items()),
        f"verification: {summary['verification_failures']} could not judge, {summary['verification_skipped']} "
        f"skipped by fast mode, cache {cache['hits']} hits / {cache['misses']} misses",
        f"rollouts: {output}",
    ]
    return "\n".join(lines)


def collect_result(config: CollectConfig, backend_name: str, stats: CollectStats) -> BenchmarkResult:
    summary = stats.summary()
    latencies = stats.latency.values
    if len(latencies) > STORED_LATENCY_SAMPLES:
        latencies = random.Random(0).sample(latencies, STORED_LATENCY_SAMPLES)
    metrics = {
        "rollouts_per_s": Metric(summary["rollouts_per_s"], "rollouts/s", "higher"),
        "output_tokens_per_s": Metric(summary["output_tokens_per_s"], "tokens/s", "higher"),
        "failed": Metric(float(stats.failed), "rollouts", "lower"),
    }
    if latencies:
        metrics["latency"] = Metric.from_samples(latencies, "s", "lower")
    for stage, value in summary["stage_mean_s"].items():
        if value is not None:
            metrics[f"stage_{stage}"] = Metric(value, "s", "lower")
    if stats.mean_reward is not None:
        metrics["mean_reward"] = Metric(stats.mean_reward, "reward", "higher")
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
