"""The one driver of load: ``gymbench collect``, a shard of a sharded collect, the pytest API, and
the probes of ``tune`` and ``diagnose``.

The owner runs the whole lifecycle, and what the caller wants to hear about is given up front (as
httpx's ``Client(transport=..., event_hooks=...)`` does)::

    collection = Collection.prepare(config, plugins, progress=..., on_failure=...)
    with contextlib.closing(collection):        # the input stays open from prepare() on
        async with collection:                  # the target: a simulator?, the backend, the watch
            stats = await collection.run()
    result = collection.result()

:meth:`Collection.prepare` does every check that needs no server (settings, plugins and their
options, the target's backend settings, input and output paths, the run's identity for resume),
so that a bad setting is said before anything starts; ``async with`` starts the
:class:`~gymbench.collect.target.Target` (the simulator when no server is named, or the
``shared_sim`` given; the backend built from its typed settings), attaches the collector and, when
asked, watches the server's ``/metrics``; leaving it stops all of that, error or not.

Probes are the same collection in closed-loop mode (:meth:`Collection.prepare_probes`): the same
checks and target, no output of their own; each probe asks :meth:`Collection.closed_loop` for a
collector over the task sample, writing to the collection's scratch directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import shutil
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gymbench.collect.collection import (
    check_metrics_path,
    check_run_identity,
    collect_result,
    collect_settings,
    make_strategy,
    metrics_path,
    routed_to_agents,
)
from gymbench.collect.config import CollectConfig, ServerConfig
from gymbench.collect.target import Target
from gymbench.engine_metrics import ReplicaWatch, ServerCounters, ServerWatch
from gymbench.errors import GymbenchError
from gymbench.plugins import Plugins
from gymbench.record import BenchmarkResult
from gymbench.replica_figures import RoutesReplicas, replica_summary
from gymbench.rollout.dataset import Task, TaskSlice, TaskStream, check_input_file, read_tasks
from gymbench.rollout.engine import Collector, CollectSettings, preflight
from gymbench.rollout.output import ResumeState, load_resume_state
from gymbench.rollout.stats import CollectStats, CollectSummary
from gymbench.rollout.verification import VerifySettings
from gymbench.types import Backend, ConcurrencyStrategy, GenerationFailed, Verifier

if TYPE_CHECKING:
    from gymbench.sim.launcher import SimServerHandle

T = TypeVar("T")


def run_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on a fresh event loop: uvloop when installed, as every command does."""
    with contextlib.suppress(ImportError):
        import uvloop

        return uvloop.run(coroutine)
    return asyncio.run(coroutine)


class CollectionProgress(Protocol):
    """What a collection reports while it runs (the command's progress bar, a shard's reports)."""

    def start(self, collector: Collector) -> None: ...

    def update(self, done: int, stats: CollectStats) -> None: ...

    def close(self, stats: CollectStats) -> None: ...


class Collection:
    """A collection from checked settings to closed files; see the module's docstring for its life."""

    def __init__(
        self,
        settings: CollectSettings,
        verifier: Callable[[], Verifier],
        target: Target | None,
        *,
        config: CollectConfig | None = None,
        tasks: TaskStream | None = None,
        progress: CollectionProgress | None = None,
        on_failure: Callable[[GenerationFailed], None] | None = None,
        shared_sim: Callable[[], SimServerHandle] | None = None,
        server_metrics: bool = False,
    ) -> None:
        """Use :meth:`prepare`, :meth:`prepare_probes` or :meth:`around`, which check everything first."""
        self.config = config
        """The collect settings (None in closed-loop mode, which writes no output of its own)."""
        self.target = target
        self.settings = settings
        self.tasks = tasks
        self.make_verifier = verifier
        self.progress = progress
        self.on_failure = on_failure
        self.shared_sim = shared_sim
        """Gives a started :class:`~gymbench.sim.SimServerHandle` to use when no server is named (the
        pytest fixture keeps one per session), asked for only then; ``None`` starts one for this run."""
        self.watch_server = server_metrics
        self.strategy: ConcurrencyStrategy | None = None
        self.resume_state: ResumeState | None = None
        """The earlier rows when resuming, read (and tidied) before any server starts."""
        self.collector: Collector | None = None
        self.backend: Backend | None = None
        self.backend_name = target.backend_name if target is not None else ""
        self.client_cpu_s = 0.0
        self.server_metrics: dict[str, Any] | None = None
        """The server's /metrics around the run (:class:`~gymbench.engine_metrics.ServerWatch`)."""
        self.server_counters = ServerCounters(None, {"engine": None, "engine_note": "not read"})
        """Closed-loop mode: the server's counters the probes read, and what was found (for the record)."""
        self.scratch: Path | None = None
        """Closed-loop mode: where the probes' rollouts go (scratch: removed when the collection closes)."""
        self._runs = 0
        self._stack = contextlib.ExitStack()
        self._watch: ServerWatch | ReplicaWatch | None = None

    @classmethod
    def prepare(
        cls,
        config: CollectConfig,
        plugins: Plugins,
        *,
        progress: CollectionProgress | None = None,
        on_failure: Callable[[GenerationFailed], None] | None = None,
        shared_sim: Callable[[], SimServerHandle] | None = None,
        server_metrics: bool = False,
    ) -> Collection:
        """Every check that needs no server; the input is opened (once) here.

        ``progress`` hears of every rollout; ``on_failure`` of every failed one; ``server_metrics``
        puts the server's ``/metrics`` around the run (as ``+scrape_metrics`` says) in the summary.
        """
        config = routed_to_agents(config)
        settings = collect_settings(config)
        verifier = plugins.verifier(config.verifier, config.verifier_options)
        strategy = make_strategy(plugins, config.strategy, config.strategy_options, config.num_samples_in_parallel)
        target = Target(config, plugins)
        collection = cls(settings, lambda: verifier, target, config=config, tasks=preflight(settings),
                         progress=progress, on_failure=on_failure, shared_sim=shared_sim,
                         server_metrics=server_metrics)  # fmt: skip
        collection.strategy = strategy
        try:
            check_metrics_path(metrics_path(settings.output_path))
            assert collection.tasks is not None
            check_run_identity(config, settings, collection.tasks.is_regular)
            if settings.resume:
                collection.resume_state = load_resume_state(
                    settings.output_path, settings.max_attempts, settings.failures_path
                )
        except BaseException:
            collection.close()
            raise
        return collection

    @classmethod
    def prepare_probes(
        cls,
        config: ServerConfig,
        plugins: Plugins,
        *,
        shared_sim: Callable[[], SimServerHandle] | None = None,
        server_counters: bool = True,
    ) -> Collection:
        """Closed-loop mode (``tune``, ``diagnose``): the same checks and target as a collection, on a
        task sample read many times, so a file (not a pipe); ``async with`` also finds the server's
        counters (with ``server_counters``)."""
        plugins.verifier(config.verifier, config.verifier_options)
        target = Target(config, plugins)
        if not config.input_jsonl_fpath:
            raise GymbenchError("needs +input_jsonl_fpath=TASKS.jsonl (the sample every probe uses)")
        source = Path(config.input_jsonl_fpath)
        if not check_input_file(source):
            raise GymbenchError(f"{source}: is a pipe; probes read the task sample many times, so give a file")
        next(read_tasks(source, TaskSlice(limit=1)), None)
        collection = cls.around(
            None,
            source,
            lambda: plugins.verifier(config.verifier, config.verifier_options),
            overrides=config.responses_create_params,
            verify=config.verify_settings(),
            target=target,
        )
        collection.shared_sim = shared_sim
        collection.watch_server = server_counters
        return collection

    @classmethod
    def around(
        cls,
        backend: Backend | None,
        sample: Path,
        verifier: Callable[[], Verifier],
        *,
        overrides: dict[str, Any] | None = None,
        verify: VerifySettings | None = None,
        target: Target | None = None,
    ) -> Collection:
        """Closed-loop mode around ``backend`` (one the caller built: the in-process simulator in
        simulated time) or the ``target``'s; the probes' rollouts go to a scratch directory."""
        scratch = Path(tempfile.mkdtemp(prefix="gymbench-tune-"))
        settings = CollectSettings(sample, scratch / "probe.jsonl", overrides=dict(overrides or {}), overwrite=True)
        if verify is not None:
            settings = replace(settings, verify=verify)
        collection = cls(settings, verifier, target)
        collection.scratch, collection.backend = scratch, backend
        return collection

    async def __aenter__(self) -> Collection:
        try:
            if self.target is not None:
                self._check_profile_workload(self.target)
                self.backend = self._stack.enter_context(self.target.started(self.shared_sim))
                self._watch_server(self.target)
            if self.config is not None:
                self._attach()
        except BaseException:
            self.close()
            raise
        return self

    def _check_profile_workload(self, target: Target) -> None:
        """With the simulator run from a calibrated profile: one warning when the tasks ask for
        another output length than the profile was fitted on (:func:`gymbench.sim.profile.workload_note`),
        read from the first tasks of a regular input file (a pipe is read once, by the run)."""
        profile = getattr(target.settings, "sim_profile", None)
        if target.simulator is None or not profile or not check_input_file(self.settings.input_path):
            return
        from gymbench.console import warn
        from gymbench.sim.profile import workload_note

        overrides = self.settings.overrides
        asked = [
            _asked_tokens({**(task.row.get("responses_create_params") or {}), **overrides})
            for task in read_tasks(self.settings.input_path, TaskSlice(limit=PROFILE_SAMPLE))
        ]
        note = workload_note(profile, asked)
        if note:
            warn(note)

    def _watch_server(self, target: Target) -> None:
        if self.config is None:
            self.server_counters = target.counters(self.watch_server)
        elif self.watch_server:
            watch = target.watch(self.config.scrape_metrics)
            self._stack.enter_context(watch)
            self._watch = watch

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _attach(self) -> None:
        assert self.strategy is not None and self.backend is not None and self.config is not None
        progress = self.progress
        collector = Collector(self.settings, self.backend, self.make_verifier(), self.strategy, tasks=self.tasks,
                              on_progress=progress.update if progress is not None else None)  # fmt: skip
        collector.on_failure = self.on_failure
        collector.resume_state = self.resume_state
        collector.slo = self.config.slo()
        self.collector = collector

    def closed_loop(
        self, strategy: ConcurrencyStrategy, tasks: Iterable[Task], label: str, clock: Callable[[], float]
    ) -> Collector:
        """Closed-loop mode: a collector for one run over ``tasks`` under ``strategy``, its rollouts in
        a fresh file of the scratch directory, with a fresh verifier."""
        assert self.scratch is not None and self.backend is not None, "closed_loop() of a probing collection"
        self._runs += 1
        settings = replace(self.settings, output_path=self.scratch / f"run{self._runs}-{label}.jsonl",
                           selection=TaskSlice(), overwrite=True, resume=False)  # fmt: skip
        return Collector(settings, self.backend, self.make_verifier(), strategy, clock=clock, tasks=tasks)  # type: ignore[arg-type]

    async def run(self) -> CollectStats:
        """Collect on the running loop; the client's CPU time is measured around it."""
        collector = self.collector
        assert collector is not None, "run() inside `async with collection:`"
        if self.progress is not None:
            self.progress.start(collector)
        frozen = _freeze_what_exists()
        started = time.process_time()
        try:
            return await collector.run()
        finally:
            self.client_cpu_s = time.process_time() - started
            if frozen:
                gc.unfreeze()
            if self.progress is not None:
                self.progress.close(collector.stats)

    def close(self) -> None:
        """Stop the watch and the simulator, close the input, remove the scratch; safe to call again."""
        try:
            self._stack.close()
        finally:
            if self._watch is not None:
                self.server_metrics, self._watch = self._watch.record(), None
            if self.tasks is not None:
                self.tasks.close()
            if self.scratch is not None:
                shutil.rmtree(self.scratch, ignore_errors=True)

    @property
    def stats(self) -> CollectStats:
        assert self.collector is not None
        return self.collector.stats

    def summary(self) -> CollectSummary:
        """The collection's statistics, with the server's /metrics when they were watched."""
        summary = self.stats.summary()
        if self.server_metrics is not None:
            summary["server_metrics"] = self.server_metrics
        if isinstance(self.backend, RoutesReplicas):
            routed = self.backend.replica_counts()
            if routed is not None:
                summary["replicas"] = replica_summary(routed, summary["elapsed_s"])
        return summary

    def result(self) -> BenchmarkResult:
        assert self.config is not None
        return collect_result(self.config, self.backend_name, self.stats, self.client_cpu_s, self.summary())


def _freeze_what_exists() -> bool:
    """Move every object alive before the run out of the garbage collector's reach until it ends.

    A full collection walks every live object; what the process loaded before the run (pytest's
    modules and ASTs in the pytest API, much less in the command) made each one dearer there, and
    the client's CPU per rollout depended on what else the process held. The rollouts' own cycles
    are still collected. Skipped when the caller froze objects itself (its freeze is left as it is).
    """
    if not gc.isenabled() or gc.get_freeze_count():
        return False
    gc.freeze()
    return True


PROFILE_SAMPLE = 100
"""Tasks read to compare the run's workload with a simulator profile's."""


def _asked_tokens(params: dict[str, Any]) -> int | None:
    value = params.get("max_output_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) else None
