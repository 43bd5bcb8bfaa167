"""``gymbench collect +num_workers=N [+launcher=local|ray]``: one collection in shards across workers.

The driver plans the shards, starts the one shared simulator (when no server is named and
``+sim_per_worker`` is off), hands shards to a launcher's workers with a bounded number of
attempts each, keeps one progress bar, then merges the shard files into ``OUT`` with the exact
check of :mod:`gymbench.collect.merge` (every expected pair once, no other), writes one metrics
file and one results record with per-worker figures. Rerunning the same command continues: every
shard resumes from its file.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gymbench.collect.collection import EndOfRunFiles, check_metrics_path, collect_settings, metrics_path, run_identity
from gymbench.collect.config import CollectConfig
from gymbench.collect.merge import Expected, merge_rollouts
from gymbench.collect.output_lock import remove_earlier_run
from gymbench.collect.shard_events import Launcher, ShardEvent
from gymbench.collect.shard_worker import ShardJob, ShardOutcome
from gymbench.collect.sharded_record import sharded_result
from gymbench.collect.shards import (
    Shard,
    ShardProgress,
    plan_shards,
    shard_cooldowns,
    shard_settings,
    shards_dir,
)
from gymbench.collect.summary import format_summary
from gymbench.collect.target import Target
from gymbench.console import warn
from gymbench.errors import GymbenchError
from gymbench.jsonio import write_json_atomic
from gymbench.plugins import Plugins
from gymbench.record import Metric
from gymbench.rollout.identity import write_run_fingerprint
from gymbench.rollout.output import check_output_path, refuse_to_overwrite
from gymbench.run import Run
from gymbench.settings import settings_dict

POLL_S = 0.25
OUTAGE_FIRST_WAIT_S = 1.0
OUTAGE_LONGEST_WAIT_S = 30.0
OUTAGE_PATIENCE_S = 300.0
"""How long a model-server outage may last before shards stopped by it spend their attempts."""


def run_sharded_collect(config: CollectConfig, plugins: Plugins) -> int:
    run = Run(plugins, "collect", config.run_name, settings_dict(config), results_dir=config.results_dir,
              save=config.save_results)  # fmt: skip
    output = _checked_output(config)
    target = Target(config, plugins)
    shards = plan_shards(config)
    with run:
        return _collect_in_shards(config, target, run, output, shards)


def _collect_in_shards(config: CollectConfig, target: Target, run: Run, output: Path, shards: list[Shard]) -> int:
    with _shared_server(config, target) as server:
        cooldowns = shard_cooldowns(config, shards)
        jobs = [
            ShardJob(s.index, 0, shard_settings(config, s, server, cooldown_rollouts=cooldowns[s.index]),
                     _own_simulator(config, target))
            for s in shards
        ]  # fmt: skip
        launcher = make_launcher(config)
        watch = target.watch(config.scrape_metrics)
        with watch:
            driver = _drive(launcher, jobs, config)
    mode = _simulator_mode(config, target)
    result = sharded_result(config, shards, driver.outcomes, driver.tries, driver.collecting_s, mode)
    result.metrics["worker_startup_s"] = Metric(driver.startup_s, "s", "lower")  # type: ignore[index]
    result.extra["distribution"]["rows_travel_by"] = launcher.rows_travel_by
    result.extra["summary"]["server_metrics"] = watch.record()
    if driver.interrupted or driver.unfinished:
        run.finish([result], save=False)
        return _stopped(config, output, driver.unfinished, driver.interrupted, driver.terminated)
    summary = result.extra["summary"]
    print(format_summary(summary, output), file=sys.stderr)
    kept = (
        f"; every rollout is kept in {shards_dir(output)}. Free space (or fix the path), then run the same "
        "command with +resume=true to merge them"
    )
    report = merge_rollouts([Path(s.path) for s in shards], output, _expected(config, shards), then=kept)
    write_run_fingerprint(output, run_identity(config, collect_settings(config), regular_input=True))
    print(f"merged {len(shards)} shards: {report.rows} rows, every expected pair exactly once", file=sys.stderr)
    files = EndOfRunFiles()
    files.write("NeMo Gym's aggregate metrics", lambda: _aggregate(config, target, output))
    files.write("the results record", lambda: run.finish([result]))
    metrics = {"summary": summary, "settings": settings_dict(config), **_shard_extra(result)}
    files.write(str(metrics_path(output)), lambda: write_json_atomic(metrics_path(output), metrics))
    return files.status(output, 0 if report.failed_rows == 0 else 1)


def _shard_extra(result: Any) -> dict[str, Any]:
    return {key: result.extra[key] for key in ("workers", "shards", "distribution")}


def _checked_output(config: CollectConfig) -> Path:
    settings = collect_settings(config)
    output = settings.output_path
    check_output_path(settings.input_path, output)
    check_metrics_path(metrics_path(output))
    if config.overwrite:
        remove_earlier_run(output)  # the caller has already, under the lock; the API may call this alone
    elif not config.resume:
        refuse_to_overwrite(output)
    return output


def _expected(config: CollectConfig, shards: list[Shard]) -> Expected:
    tasks = sum(shard.tasks for shard in shards)
    return Expected(shards[0].start_idx if shards else config.start_idx, tasks, config.num_repeats)


def _own_simulator(config: CollectConfig, target: Target) -> bool:
    return config.sim_per_worker and target.simulator is not None


def _simulator_mode(config: CollectConfig, target: Target) -> str:
    if target.simulator is None:
        return "none (a named server)"
    return "one per worker" if config.sim_per_worker else "one shared by all workers"


@contextlib.contextmanager
def _shared_server(config: CollectConfig, target: Target) -> Iterator[dict[str, Any]]:
    """The shared simulator's address for the shards' settings (the target watches it); nothing when a
    server is named or each worker runs its own."""
    if target.simulator is None or config.sim_per_worker:
        yield {}
        return
    from gymbench.sim import running_sim_server

    with running_sim_server(target.simulator) as server:
        warn(f"no server set: one simulated server (preset {config.sim_preset}) at {server.url}, shared by all workers")
        target.serve_from(server)
        yield {"base_url": target.base_url, "model": config.model or server.config.model}


def make_launcher(config: CollectConfig) -> Launcher:
    if config.launcher == "ray":
        from gymbench.collect.launch_ray import RayLauncher

        assert config.output_jsonl_fpath
        return RayLauncher(config.num_workers, config.ray_address, config.shard_transfer,
                           shards_dir(config.output_jsonl_fpath))  # fmt: skip
    from gymbench.collect.launch_local import LocalLauncher

    return LocalLauncher(config.num_workers)


def _drive(launcher: Launcher, jobs: list[ShardJob], config: CollectConfig) -> _Driver:
    """Run every shard to an outcome, retrying lost or failed ones, until done or interrupted."""
    total = sum((job.settings["end_idx"] - job.settings["start_idx"]) * config.num_repeats for job in jobs)
    driver = _Driver(jobs, config.shard_attempts)
    with _sigterm_stops(driver):
        try:
            began = time.perf_counter()
            launcher.start()  # before the bar: Ray's start-up lines would tear it
            driver.startup_s = time.perf_counter() - began
            driver.progress = ShardProgress(total, config.progress)
            driver.run(launcher)
        except (KeyboardInterrupt, _Terminated):
            driver.interrupted = True
        finally:
            driver.stopping = True  # a SIGTERM from here on is noted, not raised: the workers are being stopped
            launcher.close()
            if driver.progress is not None:
                driver.progress.close()
    return driver


class _Terminated(BaseException):  # noqa: N818 - a signal, as KeyboardInterrupt is
    """SIGTERM (``kill``, a cancelled CI job) while the shards run: the run stops as on Ctrl-C. Not an
    ``Exception``, so that no ``except Exception`` on the way (a Ray call's) takes it for an error."""


@contextlib.contextmanager
def _sigterm_stops(driver: _Driver) -> Iterator[None]:
    """SIGTERM ends the run as Ctrl-C does (the workers stopped, the shards kept, one line) with the
    shell's status for it, 143, instead of a silent death by the signal. Only the main thread may
    set a handler; elsewhere (an API caller's thread) SIGTERM keeps its own."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        driver.terminated = driver.interrupted = True  # also when it lands while the workers are stopped
        if not driver.stopping:
            driver.stopping = True
            raise _Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Driver:
    """Shards to workers until each has an outcome. A shard stopped by a model-server outage (the same
    circuit breaker as one process: ``stop_after_failures`` connection errors, timeouts or 5xx in a
    row, or a server unreachable at the start) opens the driver's own circuit: nothing is handed out
    for a back-off (1 s, doubling to 30 s), then the shard runs again and resumes, without spending one
    of its ``shard_attempts``, until the outage has lasted ``OUTAGE_PATIENCE_S``; after that outage
    failures spend attempts like any other."""

    def __init__(self, jobs: list[ShardJob], attempts: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.queue = list(reversed(jobs))
        self.jobs = {job.index: job for job in jobs}
        self.attempts = attempts
        self.tries: Counter[int] = Counter()
        self.progress: ShardProgress | None = None
        self.outcomes: dict[int, list[ShardOutcome]] = {job.index: [] for job in jobs}
        self.unfinished: dict[int, str] = {}
        self.interrupted = False
        self.terminated = False
        """Stopped by SIGTERM (exit 143) rather than Ctrl-C (130)."""
        self.stopping = False
        self.startup_s = 0.0
        self.collecting_s = 0.0
        """From the workers' start to the last shard's end: what the record's rates are over."""
        self.clock = clock
        self.outage_reruns: Counter[int] = Counter()
        self.outage_since: float | None = None
        self.hold_until = 0.0
        self.backoff_s = 0.0

    def run(self, launcher: Launcher) -> None:
        began = time.perf_counter()
        try:
            while self.queue or launcher.busy():
                while self.queue and launcher.free_slots() > 0 and self.clock() >= self.hold_until:
                    job = self.queue.pop()
                    self.tries[job.index] += 1
                    job.attempt = self.tries[job.index]
                    launcher.submit(job)
                for event in launcher.poll(POLL_S):
                    self._handle(event)
        finally:
            self.collecting_s = time.perf_counter() - began

    def _handle(self, event: ShardEvent) -> None:
        if event.kind == "progress":
            self._report(event.shard, event.done)
            return
        if event.kind == "done":
            self.outcomes[event.shard].append(event.outcome)
            if (stats := event.outcome.stats) is not None:
                self._report(event.shard, stats.skipped + stats.completed + stats.failed)
            if event.outcome.error is None:
                self.unfinished.pop(event.shard, None)
                self.outage_since, self.backoff_s = None, 0.0  # the server answers: the circuit closes
                return
            if getattr(event.outcome, "outage", False) and self._wait_for_server(event.shard, event.outcome.error):
                return
            self._retry(event.shard, event.outcome.error, event.outcome.retryable)
        else:
            self._retry(event.shard, event.reason, True)

    def _report(self, shard: int, done: int) -> None:
        if self.progress is not None:
            self.progress.report(shard, done)

    def _wait_for_server(self, shard: int, reason: str) -> bool:
        """Hold the shard (and every other) for a back-off and run it again; False once the outage has
        outlasted ``OUTAGE_PATIENCE_S``, so the shard spends an attempt."""
        now = self.clock()
        if self.outage_since is None:
            self.outage_since = now
        if now - self.outage_since > OUTAGE_PATIENCE_S:
            return False
        if now >= self.hold_until:  # the first shard to find the server down since the last hold
            self.backoff_s = min(max(2 * self.backoff_s, OUTAGE_FIRST_WAIT_S), OUTAGE_LONGEST_WAIT_S)
            self.hold_until = now + self.backoff_s
        self.outage_reruns[shard] += 1
        warn(f"shard {shard}: the model server is down ({reason}); running it again in "
             f"{self.hold_until - now:.0f} s (it resumes; no attempt spent)")  # fmt: skip
        self.queue.append(self.jobs[shard])
        return True

    def _retry(self, shard: int, reason: str, retryable: bool) -> None:
        tries = self.tries[shard] - self.outage_reruns[shard]
        if retryable and tries < self.attempts:
            warn(f"shard {shard} (attempt {tries} of {self.attempts}): {reason}; running it again (it resumes)")
            self.queue.append(self.jobs[shard])
            return
        self.unfinished[shard] = reason
        if not retryable:
            raise GymbenchError(f"shard {shard}: {reason}")


def _stopped(
    config: CollectConfig, output: Path, unfinished: dict[int, str], interrupted: bool, terminated: bool = False
) -> int:
    directory = shards_dir(output)
    again = "Run the same command again to continue: every shard resumes from its file"
    if interrupted:
        how = "terminated (SIGTERM)" if terminated else "interrupted"
        print(f"gymbench: {how}; the shards so far are in {directory}. {again}", file=sys.stderr)
        return 143 if terminated else 130
    for shard, reason in sorted(unfinished.items()):
        print(f"gymbench: error: shard {shard} failed {config.shard_attempts} times: {reason}", file=sys.stderr)
    print(f"gymbench: error: {len(unfinished)} shard(s) unfinished, so {output} was not written. {again}",
          file=sys.stderr)  # fmt: skip
    return 1


def _aggregate(config: CollectConfig, target: Target, output: Path) -> None:
    """NeMo Gym's aggregate metrics, from the merged file, when rows name agents (never the simulator's)."""
    if config.disable_aggregation or target.simulator is not None:
        return
    from gymbench.collect.aggregate import write_aggregate_metrics

    with target.started() as backend:
        written = write_aggregate_metrics(output, backend, target.backend_settings)
    if written is not None:
        print(f"aggregate metrics (NeMo Gym's): {written}", file=sys.stderr)
