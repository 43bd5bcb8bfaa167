"""``gymbench tune`` and ``gymbench diagnose``: the rollout engine probed at several parallelisms."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gymbench.collect.collection import make_strategy
from gymbench.collect.driver import Collection, run_loop
from gymbench.collect.progress import ProbeProgress
from gymbench.collect.target import chosen_backend
from gymbench.errors import GymbenchError
from gymbench.gate.markdown import write_step_summary
from gymbench.jsonio import check_writable_file
from gymbench.plugins import Plugins
from gymbench.run import Run
from gymbench.settings import settings_dict
from gymbench.tune.advice import backend_kind
from gymbench.tune.config import DiagnoseConfig, ProbeConfig, TuneConfig
from gymbench.tune.diagnose import Diagnosis, diagnose
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
from gymbench.tune.sweep import Strategies, TuneResult, adaptive_search, doubling_sweep, validate_stability
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


def tune_run(
    config: TuneConfig, plugins: Plugins, running_sim: Callable[[], SimServerHandle] | None = None
) -> TuneResult:
    search = config.search_settings()
    strategies = strategies_for(config, plugins)

    async def work(prober: Prober) -> TuneResult:
        if config.method == "adaptive":
            result = await adaptive_search(prober, search, strategies=strategies)
        else:
            result = await doubling_sweep(prober, search, strategies=strategies)
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


def run_tune(config: TuneConfig, plugins: Plugins) -> int:
    if config.plot:
        check_writable_file(config.plot, "plot", "+plot (or +plot= for none)")
    with Run(plugins, "tune", config.run_name, settings_dict(config), results_dir=config.results_dir,
             save=config.save_results) as run:  # fmt: skip
        result = tune_run(config, plugins)
        print(markdown_table(result))
        print()
        print(summary_text(result))
        run.finish([tune_result(result, {"input": Path(config.input_jsonl_fpath or "").name})])
    if config.plot:  # after the record: a plot that does not fit never costs the run its record
        print(f"plot: {plot(result, Path(config.plot))}")
    write_step_summary(markdown_table(result) + "\n\n" + summary_text(result).replace("\n", "  \n"))
    if result.stability is not None and not result.stability.passed:
        return 1
    return 0


def diagnose_run(config: DiagnoseConfig, plugins: Plugins) -> Diagnosis:
    strategies = strategies_for(config, plugins)

    async def work(prober: Prober) -> Diagnosis:
        low = await prober.probe(config.low, strategies.fixed(config.low))
        meter = ServerMeter(listed_servers(prober.collection.backend))
        meter.start()
        high = await prober.probe(config.high, strategies.fixed(config.high))
        loads = meter.finish(high.rollouts)
        diagnosis = diagnose(low, high, servers=loads, host=meter.host)
        diagnosis.backend_kind = backend_kind(chosen_backend(config)[0])
        diagnosis.server = prober.server
        return diagnosis

    return with_prober(config, plugins, work)


def run_diagnose(config: DiagnoseConfig, plugins: Plugins) -> int:
    with Run(plugins, "diagnose", config.run_name, settings_dict(config), results_dir=config.results_dir,
             save=config.save_results) as run:  # fmt: skip
        result = diagnose_run(config, plugins)
        print(diagnosis_text(result))
        run.finish([diagnose_result(result, {"input": Path(config.input_jsonl_fpath or "").name})])
    write_step_summary(diagnosis_markdown(result))
    return 0
