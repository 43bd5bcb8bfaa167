"""The one driver of a collection: ``gymbench collect``, a shard of a sharded collect and the pytest API.

The owner runs the whole lifecycle, and what the caller wants to hear about is given up front (as
httpx's ``Client(transport=..., event_hooks=...)`` does)::

    collection = Collection.prepare(config, plugins, progress=..., on_failure=...)
    with contextlib.closing(collection):        # the input stays open from prepare() on
        async with collection:                  # backend settings (a simulator?), backend, watch
            stats = await collection.run()
    result = collection.result()

:meth:`Collection.prepare` does every check that needs no server (settings, plugins and their
options, input and output paths, the run's identity for resume), so that a bad setting is said
before anything starts; ``async with`` starts the simulator when no server is named (or uses the
``shared_sim`` given), makes the backend, attaches the collector and, when asked, watches the
server's ``/metrics``; leaving it stops all of that, error or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Protocol, TypeVar

from gymbench.collect.collection import (
    backend_settings,
    check_metrics_path,
    check_run_identity,
    checked_backend,
    chosen_backend,
    collect_result,
    collect_settings,
    make_strategy,
    metrics_path,
)
from gymbench.collect.config import CollectConfig
from gymbench.collect.server_watch import ServerWatch
from gymbench.plugins import Plugins
from gymbench.record import BenchmarkResult
from gymbench.rollout.dataset import TaskStream
from gymbench.rollout.engine import Collector, CollectSettings, preflight
from gymbench.rollout.output import ResumeState, load_resume_state
from gymbench.rollout.stats import CollectStats, CollectSummary
from gymbench.types import Backend, ConcurrencyStrategy, GenerationFailed, Verifier

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
        config: CollectConfig,
        plugins: Plugins,
        settings: CollectSettings,
        tasks: TaskStream,
        *,
        progress: CollectionProgress | None = None,
        on_failure: Callable[[GenerationFailed], None] | None = None,
        shared_sim: Callable[[], Any] | None = None,
        server_metrics: bool = False,
    ) -> None:
        """Use :meth:`prepare`, which checks everything first and opens ``tasks``."""
        self.config = config
        self.plugins = plugins
        self.settings = settings
        self.tasks = tasks
        self.progress = progress
        self.on_failure = on_failure
        self.shared_sim = shared_sim
        """Gives a started :class:`~gymbench.sim.SimServerHandle` to use when no server is named (the
        pytest fixture keeps one per session), asked for only then; ``None`` starts one for this run."""
        self.watch_server = server_metrics
        self.verifier: Verifier | None = None
        self.strategy: ConcurrencyStrategy | None = None
        self.resume_state: ResumeState | None = None
        """The earlier rows when resuming, read (and tidied) before any server starts."""
        self.collector: Collector | None = None
        self.backend: Backend | None = None
        self.backend_name = ""
        self.backend_config: dict[str, Any] = {}
        self.client_cpu_s = 0.0
        self.server_metrics: dict[str, Any] | None = None
        """The server's /metrics around the run (:class:`~gymbench.collect.server_watch.ServerWatch`)."""
        self._stack = contextlib.ExitStack()
        self._watch: ServerWatch | None = None

    @classmethod
    def prepare(
        cls,
        config: CollectConfig,
        plugins: Plugins,
        *,
        progress: CollectionProgress | None = None,
        on_failure: Callable[[GenerationFailed], None] | None = None,
        shared_sim: Callable[[], Any] | None = None,
        server_metrics: bool = False,
    ) -> Collection:
        """Every check that needs no server; the input is opened (once) here.

        ``progress`` hears of every rollout; ``on_failure`` of every failed one; ``server_metrics``
        puts the server's ``/metrics`` around the run (as ``+scrape_metrics`` says) in the summary.
        """
        settings = collect_settings(config)
        verifier = plugins.verifier(config.verifier, config.verifier_options)
        strategy = make_strategy(plugins, config.strategy, config.strategy_options, config.num_samples_in_parallel)
        checked_backend(config, plugins)
        collection = cls(config, plugins, settings, preflight(settings), progress=progress, on_failure=on_failure,
                         shared_sim=shared_sim, server_metrics=server_metrics)  # fmt: skip
        collection.verifier, collection.strategy = verifier, strategy
        try:
            check_metrics_path(metrics_path(settings.output_path))
            check_run_identity(config, settings, collection.tasks.is_regular)
            if settings.resume:
                collection.resume_state = load_resume_state(settings.output_path, settings.max_attempts)
        except BaseException:
            collection.close()
            raise
        return collection

    async def __aenter__(self) -> Collection:
        try:
            sim = self.shared_sim() if self.shared_sim is not None and chosen_backend(self.config)[1] else None
            name, backend_config = self._stack.enter_context(backend_settings(self.config, self.plugins, sim))
            self._attach(name, self.plugins.backend(name, backend_config), backend_config)
            if self.watch_server:
                self._watch = self._stack.enter_context(
                    ServerWatch(
                        backend_config.get("base_url"),
                        self.config.scrape_metrics,
                        engines=self.plugins.engine_metrics(),
                    )  # fmt: skip
                )
        except BaseException:
            self.close()
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _attach(self, name: str, backend: Backend, backend_config: dict[str, Any]) -> None:
        assert self.verifier is not None and self.strategy is not None
        self.backend_name, self.backend, self.backend_config = name, backend, backend_config
        progress = self.progress
        collector = Collector(self.settings, backend, self.verifier, self.strategy, tasks=self.tasks,
                              on_progress=progress.update if progress is not None else None)  # fmt: skip
        collector.on_failure = self.on_failure
        collector.resume_state = self.resume_state
        collector.slo = self.config.slo()
        self.collector = collector

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
        """Stop the watch and the simulator, close the input; safe to call more than once."""
        try:
            self._stack.close()
        finally:
            if self._watch is not None:
                self.server_metrics, self._watch = self._watch.record(), None
            self.tasks.close()

    @property
    def stats(self) -> CollectStats:
        assert self.collector is not None
        return self.collector.stats

    def summary(self) -> CollectSummary:
        """The collection's statistics, with the server's /metrics when they were watched."""
        summary = self.stats.summary()
        if self.server_metrics is not None:
            summary["server_metrics"] = self.server_metrics
        return summary

    def result(self) -> BenchmarkResult:
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
