"""What the ``compare``, ``calibrate``, ``report``, ``baselines``, ``import`` and ``export`` commands do."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from gymbench.callgrind import INSTRUCTIONS_UNIT
from gymbench.errors import GymbenchError, ResultsFileError
from gymbench.fingerprint import machine_info
from gymbench.gate.calibrate import learn_noise, rerun_suite
from gymbench.gate.command_settings import CalibrateCommand, CompareCommand, GateCommand, Published
from gymbench.gate.compare import detectable_change
from gymbench.gate.gate import GateResult, noise_for, run_gate
from gymbench.gate.guarded import gate_or_explain
from gymbench.gate.noise import NoiseTable
from gymbench.gate.paired import paired_detectable_change
from gymbench.gate.pytest_benchmark import left_out, load_any, load_pytest_benchmark, to_pytest_benchmark
from gymbench.gate.settings import CompareSettings, settings_from_pyproject
from gymbench.gate.store import AB_CALIBRATION_DIR, BaselineStore, StoredRun, save_calibration
from gymbench.jsonio import AtomicFile, check_writable_file, refuse_inputs
from gymbench.record import ResultsRecord, utc_now, validate_record_dict
from gymbench.report.html import render_report, write_report
from gymbench.report.markdown import comparison_markdown, write_step_summary
from gymbench.report.run_report import RUN_KINDS, render_run_report
from gymbench.report.settings import BaselinesCommand, ExportCommand, ImportCommand, ReportCommand
from gymbench.report.terminal import comparison_lines, table
from gymbench.run import Run

if TYPE_CHECKING:
    from gymbench.plugins import Plugins

S = TypeVar("S")


def _settings(schema: type[S], args: argparse.Namespace) -> S:
    """A command's settings: defaults ← ``[tool.gymbench.compare]`` of ./pyproject.toml (the comparison's
    own settings) ← ``--config`` ← ``+key=value`` ← flags."""
    from gymbench.settings import SettingsFile, settings_from_args

    pyproject = Path("pyproject.toml")
    base = (
        SettingsFile(settings_from_pyproject(pyproject), str(pyproject)) if issubclass(schema, CompareSettings) else {}
    )
    return settings_from_args(schema, args, base=base)


def _gate(settings: CompareCommand | ReportCommand, baseline_spec: str, candidate_spec: str) -> GateResult:
    store = BaselineStore(Path(settings.results_dir))
    key = machine_info()["key"]
    baseline, candidate = store.select(baseline_spec, key), store.select(candidate_spec, key)
    shared = {path.resolve() for path in baseline.paths} & {path.resolve() for path in candidate.paths}
    if shared:
        raise GymbenchError(
            f"nothing to compare against: {baseline_spec!r} and {candidate_spec!r} are the same run "
            f"({baseline.label}); save another run first, or name two different runs"
        )
    noise = noise_for(Path(settings.results_dir), key, settings.calibration)
    fail_on = settings.fail_on
    return gate_or_explain(lambda: run_gate(baseline, candidate, settings, noise, fail_on), baseline, candidate)


def _publish(result: GateResult, settings: Published) -> None:
    print("\n".join(comparison_lines(result, verbose=settings.verbose)))
    markdown = comparison_markdown(result)
    if settings.markdown:
        write_report(markdown, Path(settings.markdown))
    write_step_summary(markdown)


def _run_compare(args: argparse.Namespace, plugins: Plugins) -> int:
    settings = _settings(CompareCommand, args)
    if settings.markdown:
        check_writable_file(Path(settings.markdown), "markdown summary", "--markdown")
    if settings.ab:
        return _run_compare_ab(settings)
    result = _gate(settings, str(settings.baseline), settings.candidate or "latest")
    _publish(result, settings)
    return result.enforced.cli_code


def _run_compare_ab(settings: CompareCommand) -> int:
    """Both commits measured now, interleaved; A/B calibration (``calibrate --ab``) gives the noise."""
    from gymbench.gate.ab.gate import ab_gate

    noise = noise_for(Path(settings.results_dir), machine_info()["key"], settings.calibration, AB_CALIBRATION_DIR)
    pytest_args = [*(settings.bench or ["benches"]), *(["-k", settings.keyword] if settings.keyword else [])]
    result = ab_gate(
        Path.cwd(), str(settings.baseline), settings.candidate, pytest_args, settings, settings, noise,
        settings.fail_on,
    )  # fmt: skip
    _publish(result, settings)
    return result.enforced.cli_code


DEFAULT_SUITE = ["benches/"]


def _run_gate(args: argparse.Namespace, plugins: Plugins) -> int:
    """``gymbench gate --base REF``: both commits counted, each importing its own code, then gated."""
    from gymbench.gate.base_run import gate_against_base

    settings = _settings(GateCommand, args)
    if settings.markdown:
        check_writable_file(Path(settings.markdown), "markdown summary", "--markdown")
    pytest_args = [*(settings.pytest_args or DEFAULT_SUITE), *(["-k", settings.keyword] if settings.keyword else [])]
    pytest_args += ["--gymbench-instructions-brackets", str(settings.brackets)]
    result, runs = gate_against_base(
        Path.cwd(), str(settings.base), pytest_args, settings, settings.fail_on, Path(settings.results_dir),
        settings.calibration,
    )  # fmt: skip
    for run in runs:
        print(f"counted {run.selection.label} in {run.seconds:.0f} s")
    _publish(result, settings)
    return result.enforced.cli_code


def _run_calibrate(args: argparse.Namespace, plugins: Plugins) -> int:
    settings = _settings(CalibrateCommand, args)
    ref, suite = ab_ref_and_suite(args.ab, settings.pytest_args)
    if ref is not None:
        return _run_calibrate_ab(settings, ref, suite)
    results_dir, name = Path(settings.results_dir), str(settings.save)
    store = BaselineStore(results_dir)
    key = machine_info()["key"]
    spec = settings.source
    if spec is None:
        names = rerun_suite(suite, 5 if settings.runs is None else settings.runs, name, results_dir)
        spec = f"{name}-[0-9][0-9][0-9]"
        print(f"ran the suite {len(names)} times")
    selection = store.select(spec, key)
    noise = learn_noise(selection.records, key, source=spec)
    path = save_calibration(noise, results_dir, name, utc_now())
    _print_noise(noise, settings)
    print(f"calibration from {len(selection.records)} runs saved to {path}")
    return 0


def ab_ref_and_suite(ref: str | None, suite: list[str]) -> tuple[str | None, list[str]]:
    """``--ab`` takes an optional REF, so ``calibrate --ab benches/`` hands it the suite's path:
    a value that is a path on disk and not a commit is the suite's first argument, not the ref."""
    if ref and Path(ref).exists() and not _is_commit(ref):
        return "", [ref, *suite]
    return ref, suite or list(DEFAULT_SUITE)


def _is_commit(ref: str) -> bool:
    import subprocess

    done = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], capture_output=True, check=False
    )
    return done.returncode == 0


def _run_calibrate_ab(settings: CalibrateCommand, ref: str, suite: list[str]) -> int:
    """A/A worker pairs of one commit; each metric's noise and the effect the A/B gate can then see."""
    import dataclasses

    from gymbench.gate.ab.gate import calibrate_ab
    from gymbench.gate.ab.settings import ABSettings

    key = machine_info()["key"]
    ab = ABSettings(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(ABSettings)})
    ab.repeats = settings.runs or 10  # --runs: the A/A worker pairs
    pytest_args = [*suite, *(["-k", settings.keyword] if settings.keyword else [])]
    noise, data = calibrate_ab(Path.cwd(), ref or None, pytest_args, ab, key)
    if not noise.metrics:
        raise GymbenchError(
            f"no benchmark of {' '.join(pytest_args)} was measured in {ab.repeats} A/A worker pairs "
            "(A/B calibration needs at least 3 pairs and benchmarks that call gymbench.measure)"
        )
    path = save_calibration(noise, Path(settings.results_dir), str(settings.save), utc_now(), AB_CALIBRATION_DIR)
    _print_noise(noise, settings, repeats=ABSettings().repeats)
    for skipped in data.skipped:
        print(f"not measured: {skipped.what}: {skipped.why}")
    print(f"A/B calibration from {ab.repeats} A/A worker pairs saved to {path}")
    return 0


def _print_noise(noise: NoiseTable, settings: CompareSettings, repeats: int | None = None) -> None:
    """Each metric's noise and MDE: one run against one, or the A/B gate's median of ``repeats`` pairs."""
    mde_title = f"MDE (A/B, {repeats} pairs)" if repeats else "MDE (1 vs 1 run)"
    rows = [("benchmark", "metric", "run-to-run sd", "moderated", mde_title, "gated")]
    for bench_id, by_metric in noise.metrics.items():
        for metric, found in by_metric.items():
            sd, df = noise.moderated(bench_id, metric) or (found.run_sd, math.inf)
            if repeats:
                mde = paired_detectable_change(sd, df, settings, repeats)
            else:
                mde = detectable_change(sd, df, settings)
            unit = INSTRUCTIONS_UNIT if metric.split("_")[-1] == INSTRUCTIONS_UNIT else "s"
            gated = "yes" if mde <= settings.min_effect_for(bench_id, {}, unit) else "no (too noisy)"
            rows.append((bench_id, metric, f"{found.run_sd:.2%}", f"{sd:.2%}", f"{mde:.1%}", gated))
    print("\n".join(table(rows)))


def _run_report(args: argparse.Namespace, plugins: Plugins) -> int:
    settings = _settings(ReportCommand, args)
    output = Path(str(settings.output))
    candidate = settings.candidate or "latest"
    inputs = [spec for spec in (settings.baseline, candidate) if spec and Path(spec).exists()]  # files, not names
    refuse_inputs(output, inputs)
    check_writable_file(output, "report", "-o")
    if settings.markdown:
        refuse_inputs(Path(settings.markdown), [*inputs, output], "--markdown")
        check_writable_file(Path(settings.markdown), "markdown summary", "--markdown")
    single = _single_run(settings)
    if single is not None:
        path = write_report(render_run_report(single), output)
        print(f"report on {single.kind} run {single.name} written to {path}")
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
    result = _gate(settings, baseline, candidate)
    path = write_report(render_report(result, runs, settings.history_metric), output)
    _publish(result, settings)
    print(f"report written to {path}")
    return result.enforced.cli_code


def _single_run(settings: ReportCommand) -> ResultsRecord | None:
    """The record of ``gymbench report RUN`` when it is one collection or tuning sweep and there is
    nothing to compare it with: a record file, a saved run's name that is also the latest run, or,
    with no run named, the store's only run. A report of a run against itself would say nothing."""
    if settings.candidate not in (None, "latest"):
        return None
    path = Path(settings.baseline) if settings.baseline else None
    if path is None or not path.is_file():
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
    settings = _settings(BaselinesCommand, args)
    store = BaselineStore(Path(settings.results_dir))
    runs = store.runs(None if settings.all_machines else machine_info()["key"])
    rows = [("stamp", "name", "machine", "commit", "path")]
    rows += [(r.stamp, r.name, r.machine_key, _commit(r)[:10], str(r.path)) for r in runs]
    print("\n".join(table(rows)) if runs else f"no saved runs in {settings.results_dir}/ for this machine")
    return 0


def _commit(run: StoredRun) -> str:
    """A listing shows every file: one that cannot be read is marked, with a warning naming it."""
    try:
        return run.commit or "-"
    except ResultsFileError as exc:
        print(f"gymbench: warning: {exc}", file=sys.stderr)
        return "(unreadable)"


def _run_import(args: argparse.Namespace, plugins: Plugins) -> int:
    settings = _settings(ImportCommand, args)
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
    settings = _settings(ExportCommand, args)
    source, output, metric = Path(str(settings.path)), Path(str(settings.output)), settings.metric
    refuse_inputs(output, [source])
    check_writable_file(output, "export", "-o")
    record = load_any(source)
    data, skipped = to_pytest_benchmark(record, metric), left_out(record, metric)
    for bench_id, metrics in skipped.items():
        others = f"; it has {', '.join(metrics)} (export one with --metric NAME)" if metrics else ""
        print(f"gymbench: warning: left out {bench_id}: no {metric!r} metric{others}", file=sys.stderr)
    if not data["benchmarks"]:
        raise GymbenchError(
            f"{source}: no benchmark has a {metric!r} metric, so nothing was exported; "
            f"choose one of its metrics with --metric ({', '.join(_metric_names(skipped)) or 'it has none'})"
        )
    with AtomicFile(output, text=True, then="; choose another -o") as out:  # never half an export
        out.write(json.dumps(data, indent=1) + "\n")
    print(
        f"exported {len(data['benchmarks'])} benchmarks to {output}" + (f", left out {len(skipped)}" if skipped else "")
    )
    return 0


def _metric_names(left_out: dict[str, list[str]]) -> list[str]:
    return sorted({name for metrics in left_out.values() for name in metrics})
