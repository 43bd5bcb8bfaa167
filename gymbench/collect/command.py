"""``gymbench collect``: a prepared collection with the embedded simulator when no server is named,
a progress bar, a summary, the metrics files (gymbench's and NeMo Gym's) and the results record.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path

from gymbench.collect.aggregate import write_aggregate_metrics
from gymbench.collect.collection import UNBOUNDED_WARNING, EndOfRunFiles, collect_settings, metrics_path
from gymbench.collect.config import CollectConfig
from gymbench.collect.driver import Collection, run_loop
from gymbench.collect.output_lock import output_lock, remove_earlier_run
from gymbench.collect.progress import CollectProgressBar
from gymbench.collect.summary import format_summary
from gymbench.console import warn
from gymbench.errors import GymbenchError
from gymbench.jsonio import write_json_atomic
from gymbench.plugins import Plugins
from gymbench.rollout.engine import Collector
from gymbench.rollout.output import check_output_path
from gymbench.rollout.stats import CollectStats
from gymbench.run import Run
from gymbench.settings import settings_dict
from gymbench.types import GenerationFailed


def run_collect(config: CollectConfig, plugins: Plugins) -> int:
    """One run per output: the output's lock is held from before anything is read until the end."""
    settings = collect_settings(config)  # says first what is missing
    output = settings.output_path
    with output_lock(output):
        if config.overwrite and not config.resume:
            check_output_path(settings.input_path, output)  # never the tasks' own files
            remove_earlier_run(output)  # nothing of the earlier run (its shards above all) is continued
        if _nothing_selected(config) and not _begun_in_shards(config):
            return _collect_in_one_process(config, plugins)  # an empty output and summary, as NeMo Gym's slice
        if config.sharded or _begun_in_shards(config):
            from gymbench.collect.sharded import run_sharded_collect

            return run_sharded_collect(config, plugins)
        return _collect_in_one_process(config, plugins)


def _nothing_selected(config: CollectConfig) -> bool:
    """Warn (one line) when start_idx/end_idx/limit select no task of the input: the run then exits 0
    with an empty output, as NeMo Gym's ``ng_collect_rollouts`` slices an empty list, sharded or not."""
    from gymbench.collect.shards import selection_of
    from gymbench.rollout.dataset import empty_selection

    selection = selection_of(config)
    if selection.start_idx == 0 and selection.stop is None or config.input_jsonl_fpath is None:
        return False  # the whole file: never empty (an empty file is an error of its own)
    try:
        note = empty_selection(config.input_jsonl_fpath, selection)
    except GymbenchError:
        return False  # a missing or unreadable input: the collection says so in its own words
    if note is not None:
        warn(note)
    return note is not None


def _collect_in_one_process(config: CollectConfig, plugins: Plugins) -> int:
    run = Run(plugins, "collect", config.run_name, settings_dict(config), results_dir=config.results_dir,
              save=config.save_results)  # fmt: skip
    collection = Collection.prepare(config, plugins, progress=CollectProgressBar(config.progress),
                                    on_failure=_warn_once_per_kind(), server_metrics=True)  # fmt: skip
    with contextlib.closing(collection), run:
        if config.num_samples_in_parallel is None and config.strategy == "semaphore":
            warn(UNBOUNDED_WARNING)
        interrupted = _collect(collection)
        return _report(config, collection, run, interrupted)


def _report(config: CollectConfig, collection: Collection, run: Run, interrupted: bool) -> int:
    """The summary, NeMo Gym's aggregate metrics, the record and the metrics file; then the exit status.
    The summary comes first, so a file that cannot be written at the end costs only that file."""
    collector, output, backend = collection.collector, collection.settings.output_path, collection.backend
    assert collector is not None and backend is not None and collection.target is not None
    summary = collection.summary()
    print(format_summary(summary, output, collection.settings.failures_path), file=sys.stderr)
    files = EndOfRunFiles()
    if not (interrupted or config.disable_aggregation or collector.problems.errors):
        settings = collection.target.backend_settings
        aggregated = files.write(
            "NeMo Gym's aggregate metrics", lambda: write_aggregate_metrics(output, backend, settings)
        )
        if aggregated is not None:
            print(f"aggregate metrics (NeMo Gym's): {aggregated}", file=sys.stderr)
    files.write(
        "the results record", lambda: run.finish([collection.result()], save=config.save_results and not interrupted)
    )
    metrics = {"summary": summary, "settings": settings_dict(config)}
    files.write(str(metrics_path(output)), lambda: write_json_atomic(metrics_path(output), metrics))
    status = _exit_status(collector, collector.stats, output, interrupted)
    return status if interrupted else files.status(output, status)


def _begun_in_shards(config: CollectConfig) -> bool:
    """A run begun in shards continues in shards (with one worker, unless told more), never beside them."""
    from gymbench.collect.shards import shards_dir

    if config.overwrite or not config.output_jsonl_fpath:
        return False
    try:
        if not (shards_dir(config.output_jsonl_fpath) / "plan.json").exists():
            return False
    except (OSError, ValueError):  # a name too long: the output check says so in a moment
        return False
    warn(f"{shards_dir(config.output_jsonl_fpath)} holds this run's shards: continuing them with one worker")
    return True


def _cancelled(pairs: list[tuple[int, int]]) -> str:
    """The rollouts cancelled in flight, named (task/rollout), for the stop line; a resume redoes them."""
    if not pairs:
        return ""
    named = ", ".join(f"{t}/{r}" for t, r in sorted(pairs)[:10]) + (" ..." if len(pairs) > 10 else "")
    return f" ({len(pairs)} cancelled in flight, task/rollout: {named})"


def _exit_status(collector: Collector, stats: CollectStats, output: Path, interrupted: bool) -> int:
    """Say how the run ended; every rollout is either in ``output`` or will be redone by a resume."""
    problems = collector.problems
    resume = "Run the same command with +resume=true to continue."
    rows_in = _rows_in(collector, output)
    if interrupted:
        print(f"gymbench: interrupted; {stats.completed + stats.failed} rollouts are in {rows_in}. {resume}",
              file=sys.stderr)  # fmt: skip
        return 130
    for error in problems.errors:
        print(f"gymbench: error: {error}", file=sys.stderr)
    if problems.errors:
        unwritten = [*problems.unwritten, *problems.cancelled_pairs]
        missing = ", ".join(f"{t}/{r}" for t, r in unwritten[:10]) or "none"
        print(
            f"gymbench: error: the run stopped after an error; rollouts without a row (task/rollout): "
            f"{missing}{' ...' if len(unwritten) > 10 else ''}. Fix the cause, then: {resume}",
            file=sys.stderr,
        )
        return 1
    if problems.stop_reason is not None:
        print(
            f"gymbench: error: stopped early: {problems.stop_reason}. {stats.completed + stats.failed} rollouts "
            f"are in {rows_in}; the rest were not attempted{_cancelled(problems.cancelled_pairs)}. Check the server, "
            f"then: {resume}",
            file=sys.stderr,
        )
        return 1
    return 0 if stats.failed == 0 else 1


def _rows_in(collector: Collector, output: Path) -> str:
    """Where the run's rows are: the output, and its failures sidecar when failed rows go there."""
    failures = collector.settings.failures_path
    return str(output) if failures is None else f"{output} and {failures}"


def _collect(collection: Collection) -> bool:
    """Run the collection on a fresh event loop (uvloop when installed); True when interrupted."""

    async def main() -> None:
        async with collection:
            await collection.run()

    coroutine = main()
    try:
        run_loop(coroutine)
    except KeyboardInterrupt:
        coroutine.close()  # interrupted before the loop started it: no "never awaited" warning
        if collection.collector is None:  # before the collection began: nothing to report on
            raise
        return True
    return False


def _warn_once_per_kind() -> Callable[[GenerationFailed], None]:
    """A warning on the first failed rollout of each kind; the rest are counted in the summary."""
    seen: set[tuple[str, int | None]] = set()

    def on_failure(failure: GenerationFailed) -> None:
        if (failure.kind, failure.status) not in seen:
            seen.add((failure.kind, failure.status))
            warn(f"a rollout failed ({failure.kind}): {failure.reason}; further failures of this kind are counted")

    return on_failure
