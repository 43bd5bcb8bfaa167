"""``gymbench tune`` and ``gymbench diagnose``: the rollout engine probed at several parallelisms."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

from gymbench.collect.collection import make_strategy
from gymbench.collect.driver import Collection, run_loop
from gymbench.collect.progress import ProbeProgress
from gymbench.collect.target import chosen_backend
from gymbench.errors import GymbenchError
from gymbench.gate.markdown import write_step_summary
from gymbench.jsonio import check_writable_file
from gymbench.plugins import Plugins
from gymbench.replica_figures import ReplicaSummary, RoutesReplicas, RoutingCounts, replica_summary
from gymbench.run import Run
from gymbench.settings import settings_dict
from gymbench.tune.advice import backend_kind
from gymbench.tune.capacity import CapacitySignals, read_capacity
from gymbench.tune.config import DiagnoseConfig, ProbeConfig, TuneConfig
from gymbench.tune.diagnose import Diagnosis, diagnose
from gymbench.tune.knee_search import KneeSearch, SearchSettings
from gymbench.tune.probe import Prober
from gymbench.tune.report import (
    diagnose_result,
    diagnosis_markdown,
    diagnosis_text,
    markdown_table,
    plot,
    summary_text,
    tune_result,
)
from gymbench.tune.server_load import ServerMeter, listed_servers
from gymbench.tune.sweep import (
    Strategies,
    SweepLog,
    TuneResult,
    adaptive_search,
    doubling_sweep,
    validate_stability,
)
from gymbench.types import is_open_loop

if TYPE_CHECKING:
    from gymbench.sim.launcher import SimServerHandle

T = TypeVar("T")


def strategies_for(config: ProbeConfig, plugins: Plugins) -> Strategies:
    """Probes hold a fixed parallelism through the configured strategy, which must take one.

    Checked before anything runs. An open-loop strategy (:func:`~gymbench.types.is_open_loop`, a
    third party's too) is refused, since a sweep of the number in flight means nothing to one that
    sends on a schedule: by its settings dataclass before its options are checked (a missing
    request rate is not worth fixing first), else by the strategy once built."""
    if is_open_loop(plugins.schema("strategy", config.strategy)):
        raise _open_loop_refused(config.strategy)
    declared = plugins.options("strategy", config.strategy)
    takes_parallelism = declared is None or "num_samples_in_parallel" in declared
    built = make_strategy(plugins, config.strategy, config.strategy_options, 1 if takes_parallelism else None)
    if is_open_loop(built):
        raise _open_loop_refused(config.strategy)
    if not takes_parallelism:
        raise GymbenchError(
            f"strategy {config.strategy!r} has no num_samples_in_parallel setting, so it cannot be probed at a "
            "fixed parallelism; tune with +strategy=semaphore (the default) or a strategy that takes one"
        )
    return Strategies.from_plugins(plugins, config.strategy, config.strategy_options)


def _open_loop_refused(name: str) -> GymbenchError:
    return GymbenchError(
        f"strategy {name!r} is open-loop (it sends requests on a schedule, whatever is in flight), but tune and "
        "diagnose sweep closed-loop parallelism (a fixed number of rollouts in flight): tune with "
        f"+strategy=semaphore (the default), or sweep the rate with gymbench collect +strategy={name}, "
        "one run per rate (docs/collection.md, open-loop arrivals)"
    )


def with_prober(
    config: ProbeConfig,
    plugins: Plugins,
    work: Callable[[Prober], Coroutine[Any, Any, T]],
    running_sim: Callable[[], SimServerHandle] | None = None,
) -> T:
    """Probe through a collection in closed-loop mode: its target (the simulator, unless one is
    running), the server's counters, a prober on the task sample; then ``work``."""
    collection = Collection.prepare_probes(
        config, plugins, shared_sim=running_sim, server_counters=config.server_counters
    )
    progress = ProbeProgress(config.progress)

    async def main() -> T:
        async with collection:
            found = collection.server_counters
            prober = Prober(collection, config.sample_size, config.precision_rule(), found.counters)
            prober.server = found.record
            prober.progress = progress
            return await work(prober)

    with contextlib.closing(collection):
        try:
            return run_loop(main())
        finally:
            progress.close()


@dataclass
class PartialTune:
    """Where an interrupted tune finds what it measured: the sweep's log, once its prober exists."""

    log: SweepLog | None = None
    capacity: list[str] = dataclasses.field(default_factory=list)
    replicas: int = 1

    def result(self, why: str) -> TuneResult | None:
        result = None if self.log is None else self.log.result(partial=why)
        if result is not None:
            result.capacity = [*self.capacity, *result.capacity]
            result.replicas = self.replicas
        return result


def tune_run(
    config: TuneConfig,
    plugins: Plugins,
    running_sim: Callable[[], SimServerHandle] | None = None,
    partial: PartialTune | None = None,
) -> TuneResult:
    """Tune by ``config``; ``partial``, when given, holds the sweep's levels as they are measured."""
    search = config.search_settings()
    strategies = strategies_for(config, plugins)
    budget_s = config.time_budget_s

    async def work(prober: Prober) -> TuneResult:
        settings, signals = await _around_capacity(prober, search)
        if config.method == "adaptive":
            result = await adaptive_search(prober, settings, strategies=strategies, budget_s=budget_s)
        else:
            log = SweepLog(prober, KneeSearch(settings, signals.slots), prober.clock())
            if partial is not None:
                partial.log, partial.capacity, partial.replicas = log, signals.said, _replicas(prober)
            result = await doubling_sweep(prober, settings, strategies=strategies, budget_s=budget_s, log=log,
                                          slots=signals.slots)  # fmt: skip
        result.capacity = [*signals.said, *result.capacity]
        result.replicas = _replicas(prober)
        if config.slo_p50_ms is not None:
            result.meet_latency_objective(config.slo_p50_ms / 1e3)
        prober.deadline = None  # the budget is the search's: a stability run is asked for by its count
        if config.stability_rollouts > 0:
            result.stability = await validate_stability(
                prober,
                result.recommended,
                config.stability_rollouts,
                result.expected_rollouts_per_s,
                strategies=strategies,
            )
        result.server = prober.server
        return result

    return with_prober(config, plugins, work, running_sim)


def _replicas(prober: Prober) -> int:
    """How many model replicas the probes' load is spread over (1 for one server or an agent)."""
    target = prober.collection.target
    return max(1, len(target.base_urls)) if target is not None else 1


async def _around_capacity(prober: Prober, search: SearchSettings) -> tuple[SearchSettings, CapacitySignals]:
    """The search's settings with its first level below the slot count the server says it has, and
    the capacity signals used (:mod:`gymbench.tune.capacity`): the sweep keeps the slot count, which
    with each level's queue tells a flat stretch from the plateau."""
    target = prober.collection.target
    simulator = target.simulator if target is not None else None
    base_urls = target.base_urls if target is not None else []
    found = await asyncio.to_thread(read_capacity, simulator, base_urls, prober.server)
    start = found.start(search.start)
    if start == search.start:
        return search, found
    said = [*found.said, f"started at {start}, below the slot count, instead of start={search.start}"]
    return dataclasses.replace(search, start=start), CapacitySignals(found.slots, said)


def run_tune(config: TuneConfig, plugins: Plugins) -> int:
    if config.plot:
        check_writable_file(config.plot, "plot", "+plot (or +plot= for none)")
    partial = PartialTune()
    params = {"input": Path(config.input_jsonl_fpath or "").name}
    run = Run(plugins, "tune", config.run_name, settings_dict(config), results_dir=config.results_dir,
              save=config.save_results)  # fmt: skip
    with _sigterm_as_ctrl_c() as signals, run:
        try:
            result = tune_run(config, plugins, partial=partial)
        except KeyboardInterrupt:
            return _interrupted(partial, run, params, signals.terminated)
        print(markdown_table(result))
        print()
        print(summary_text(result))
        run.finish([tune_result(result, params)])
    if config.plot:  # after the record: a plot that does not fit never costs the run its record
        print(f"plot: {plot(result, Path(config.plot))}")
    write_step_summary(markdown_table(result) + "\n\n" + summary_text(result).replace("\n", "  \n"))
    if result.stability is not None and not result.stability.passed:
        return 1
    return 0


def _interrupted(partial: PartialTune, run: Run, params: dict[str, Any], terminated: bool) -> int:
    """Ctrl-C or SIGTERM mid-tune: print and save what was measured, marked partial; the CLI's exit
    status for the interrupt (130, or the shell's 143 for SIGTERM)."""
    how = "terminated (SIGTERM)" if terminated else "interrupted (Ctrl-C)"
    status = 143 if terminated else 130
    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C while saving: what is saved is saved
        result = partial.result(how)
        if result is None:
            print(f"gymbench: {how} before the first level was measured: nothing to save", file=sys.stderr)
            return status
        print(markdown_table(result))
        print()
        print(summary_text(result))
        run.finish([tune_result(result, params)])
        print(f"gymbench: {how}: the partial result above is saved", file=sys.stderr)
    return status


class _Signals:
    terminated = False


@contextlib.contextmanager
def _sigterm_as_ctrl_c() -> Iterator[_Signals]:
    """SIGTERM (``kill``, a cancelled CI job) stops a tune as Ctrl-C does, by sending this process
    SIGINT: the event loop then cancels the probe in flight and the tune reports what it measured
    (issue 39: it used to die and leave nothing). Only the main thread may set a handler.

    The handler calls SIGINT's handler itself rather than raising SIGINT: a process started in the
    background by a non-interactive shell (a CI step, ``nohup cmd &``) inherits SIGINT *ignored*,
    so a raised SIGINT did nothing and the tune ran on to the end, exit 0. For the tune's length an
    ignored SIGINT gets Python's default handler back, so that asyncio's runner installs its own
    (it does only over the default one) and SIGTERM reaches the tune's task through it: raising
    KeyboardInterrupt from this handler instead could land in a finaliser (aiohttp's
    ``Connection.__del__``), where Python prints it and goes on, and the tune ran to its end."""
    signals = _Signals()
    if threading.current_thread() is not threading.main_thread():
        yield signals
        return

    def terminated(signum: int, frame: FrameType | None) -> None:
        signals.terminated = True
        on_interrupt = signal.getsignal(signal.SIGINT)
        if not callable(on_interrupt):  # SIG_DFL, or None (a handler not set from Python)
            raise KeyboardInterrupt
        on_interrupt(signal.SIGINT, frame)  # asyncio's runner: cancels the tune's task, which reports

    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield signals
    finally:
        signal.signal(signal.SIGTERM, previous)
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def diagnose_run(config: DiagnoseConfig, plugins: Plugins) -> Diagnosis:
    strategies = strategies_for(config, plugins)

    async def work(prober: Prober) -> Diagnosis:
        low = await prober.probe(config.low, strategies.fixed(config.low))
        meter = ServerMeter(listed_servers(prober.collection.backend))
        meter.start()
        routed = _routing_counts(prober.collection.backend)
        high = await prober.probe(config.high, strategies.fixed(config.high))
        loads = meter.finish(high.rollouts)
        replicas = _replica_figures(prober.collection.backend, high.elapsed_s, since=routed)
        diagnosis = diagnose(low, high, servers=loads, host=meter.host, replicas=replicas)
        diagnosis.backend_kind = backend_kind(chosen_backend(config)[0])
        diagnosis.server = prober.server
        return diagnosis

    return with_prober(config, plugins, work)


def _routing_counts(backend: object) -> RoutingCounts | None:
    return backend.replica_counts() if isinstance(backend, RoutesReplicas) else None


def _replica_figures(backend: object, elapsed_s: float, since: RoutingCounts | None = None) -> ReplicaSummary | None:
    """Each model replica's figures over the high probe (the router counts from the start, so the
    counts ``since`` the low probe ended), or None for a backend with one server. The high probe
    alone: a replica with few slots is fast at the low probe (it runs each request alone) and slow
    only once it queues, so pooling the two probes dilutes what the verdict is about (three
    llama.cpp replicas, one with 1 slot of 4, over both probes: 1.3x the replicas' median p50 in one
    run, under the 1.5x that names a straggler, and 5.2x in the next)."""
    counts = _routing_counts(backend)
    if counts is None or len(counts.replicas) < 2:
        return None
    return replica_summary(counts.since(since) if since is not None else counts, elapsed_s)


def run_diagnose(config: DiagnoseConfig, plugins: Plugins) -> int:
    with Run(plugins, "diagnose", config.run_name, settings_dict(config), results_dir=config.results_dir,
             save=config.save_results) as run:  # fmt: skip
        result = diagnose_run(config, plugins)
        print(diagnosis_text(result))
        run.finish([diagnose_result(result, {"input": Path(config.input_jsonl_fpath or "").name})])
    write_step_summary(diagnosis_markdown(result))
    return 0
