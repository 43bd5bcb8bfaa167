"""What the ``report``, ``baselines``, ``import`` and ``export`` commands do (the gate's own commands:
:mod:`gymbench.gate.command_runs`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gymbench.console import printable
from gymbench.errors import GymbenchError, ResultsFileError
from gymbench.fingerprint import machine_info
from gymbench.gate.command_runs import command_settings, gate_stored_runs, publish
from gymbench.gate.pytest_benchmark import left_out, load_any, load_pytest_benchmark, to_pytest_benchmark
from gymbench.gate.store import BaselineStore, StoredRun, is_file_spec
from gymbench.gate.terminal import table
from gymbench.jsonio import AtomicFile, check_writable_file, refuse_inputs
from gymbench.record import ResultsRecord, validate_record_dict
from gymbench.report.html import render_report, write_report
from gymbench.report.run_report import RUN_KINDS, render_run_report
from gymbench.report.settings import BaselinesCommand, ExportCommand, ImportCommand, ReportCommand
from gymbench.run import Run

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


def _run_report(args: argparse.Namespace, plugins: Plugins) -> int:
    settings = command_settings(ReportCommand, args)
    output = Path(str(settings.output))
    candidate = settings.candidate or "latest"
    inputs = [spec for spec in (settings.baseline, candidate) if spec and is_file_spec(spec)]  # files, not names
    refuse_inputs(output, inputs)
    check_writable_file(output, "report", "-o")
    if settings.markdown:
        refuse_inputs(Path(settings.markdown), [*inputs, output], "--markdown")
        check_writable_file(Path(settings.markdown), "markdown summary", "--markdown")
    single = _single_run(settings)
    if single is not None:
        path = write_report(render_run_report(single), output)
        print(printable(f"report on {single.kind} run {single.name} written to {path}"))
        return 0
    store = BaselineStore(Path(settings.results_dir))
    key = machine_info()["key"]
    runs = store.runs(key) or store.runs()
    baseline = settings.baseline
    if baseline is None:
        if len(runs) < 2:
            raise GymbenchError(
                f"{settings.results_dir}/ holds {len(runs)} run(s); a report needs a baseline and a candidate"
            )
        baseline = str(runs[-2].path)
    result = gate_stored_runs(settings, baseline, candidate)
    path = write_report(render_report(result, runs, settings.history_metric), output)
    publish(result, settings)
    print(f"report written to {path}")
    return result.enforced.cli_code


def _single_run(settings: ReportCommand) -> ResultsRecord | None:
    """The record of ``gymbench report RUN`` when it is one collection or tuning sweep and there is
    nothing to compare it with: a record file, a saved run's name that is also the latest run, or,
    with no run named, the store's only run. A report of a run against itself would say nothing."""
    if settings.candidate not in (None, "latest"):
        return None
    path = Path(settings.baseline) if settings.baseline else None
    if path is None or not is_file_spec(path):
        store = BaselineStore(Path(settings.results_dir))
        key = machine_info()["key"]
        runs = store.runs(key) or store.runs()
        try:
            named = store.select(settings.baseline, key) if settings.baseline else None
            latest = store.select("latest", key) if runs else None
        except GymbenchError:
            return None  # the comparison's path says what is wrong
        if named is None:
            if len(runs) != 1:
                return None
            path = runs[0].path
        elif (
            latest is None
            or len(named.paths) != 1
            or {p.resolve() for p in named.paths} != {p.resolve() for p in latest.paths}
        ):
            return None
        else:
            path = named.paths[0]
    record = load_any(path)
    return record if record.kind in RUN_KINDS else None


def _run_baselines(args: argparse.Namespace, plugins: Plugins) -> int:
    settings = command_settings(BaselinesCommand, args)
    store = BaselineStore(Path(settings.results_dir))
    runs = store.runs(None if settings.all_machines else machine_info()["key"])
    rows = [("stamp", "name", "machine", "commit", "path")]
    rows += [(r.stamp, r.name, r.machine_key, _commit(r)[:10], str(r.path)) for r in runs]
    listing = "\n".join(printable(line) for line in table(rows))  # a commit id is whatever the record says
    print(listing if runs else f"no saved runs in {settings.results_dir}/ for this machine")
    return 0


def _commit(run: StoredRun) -> str:
    """A listing shows every file: one that cannot be read is marked, with a warning naming it."""
    try:
        return run.commit or "-"
    except ResultsFileError as exc:
        print(f"gymbench: warning: {printable(str(exc))}", file=sys.stderr)
        return "(unreadable)"


def _run_import(args: argparse.Namespace, plugins: Plugins) -> int:
    settings = command_settings(ImportCommand, args)
    source = Path(str(settings.path))
    record = load_pytest_benchmark(source)
    name = settings.save or record.name
    imported = ResultsRecord(name, record.benchmarks, record.fingerprint, record.created_at, record.kind)
    validate_record_dict(imported.to_dict(), str(source))  # a problem names the file it came from
    with Run(plugins, "import", name, {"path": str(source)}, results_dir=Path(settings.results_dir)) as run:
        run.finish(imported)
    print(f"imported {len(record.benchmarks)} benchmarks from {source}")
    return 0


def _run_export(args: argparse.Namespace, plugins: Plugins) -> int:
    settings = command_settings(ExportCommand, args)
    source, output, metric = Path(str(settings.path)), Path(str(settings.output)), settings.metric
    refuse_inputs(output, [source])
    check_writable_file(output, "export", "-o")
    record = load_any(source)
    data, skipped = to_pytest_benchmark(record, metric), left_out(record, metric)
    for bench_id, metrics in skipped.items():
        others = f"; it has {', '.join(metrics)} (export one with --metric NAME)" if metrics else ""
        print(printable(f"gymbench: warning: left out {bench_id}: no {metric!r} metric{others}"), file=sys.stderr)
    if not data["benchmarks"]:
        raise GymbenchError(
            f"{source}: no benchmark has a {metric!r} metric, so nothing was exported; "
            f"choose one of its metrics with --metric ({printable(', '.join(_metric_names(skipped))) or 'it has none'})"
        )
    with AtomicFile(output, text=True, then="; choose another -o") as out:  # never half an export
        out.write(json.dumps(data, indent=1) + "\n")
    print(
        f"exported {len(data['benchmarks'])} benchmarks to {output}" + (f", left out {len(skipped)}" if skipped else "")
    )
    return 0


def _metric_names(left_out: dict[str, list[str]]) -> list[str]:
    return sorted({name for metrics in left_out.values() for name in metrics})
