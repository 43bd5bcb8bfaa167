"""What the ``compare``, ``calibrate``, ``report``, ``baselines``, ``import`` and ``export`` commands do."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gymbench.errors import GymbenchError, ResultsFileError
from gymbench.fingerprint import machine_info
from gymbench.gate.calibrate import learn_noise, rerun_suite
from gymbench.gate.compare import detectable_change
from gymbench.gate.gate import GateResult, noise_for, run_gate
from gymbench.gate.guarded import gate_or_explain
from gymbench.gate.noise import NoiseTable
from gymbench.gate.paired import paired_detectable_change
from gymbench.gate.pytest_benchmark import left_out, load_any, load_pytest_benchmark, to_pytest_benchmark
from gymbench.gate.settings import CompareSettings, compare_settings
from gymbench.gate.store import AB_CALIBRATION_DIR, BaselineStore, StoredRun, save_calibration
from gymbench.jsonio import AtomicFile, check_writable_file, refuse_inputs
from gymbench.measure import INSTRUCTIONS_UNIT
from gymbench.record import ResultsRecord, utc_now, validate_record_dict
from gymbench.report.html import render_report, write_report
from gymbench.report.markdown import comparison_markdown, write_step_summary
from gymbench.report.run_report import RUN_KINDS, render_run_report
from gymbench.report.terminal import comparison_lines, table
from gymbench.run import Run

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


def _gate(args: argparse.Namespace, baseline_spec: str, candidate_spec: str) -> GateResult:
    store = BaselineStore(args.results_dir)
    key = machine_info()["key"]
    settings = compare_settings(
        Path("pyproject.toml"),
        min_effect=args.min_effect,
        alpha=args.alpha,
        metrics=tuple(args.metrics) if args.metrics else None,
        correct_shift=False if args.no_shift_correction else None,
    )
    baseline, candidate = store.select(baseline_spec, key), store.select(candidate_spec, key)
    shared = {path.resolve() for path in baseline.paths} & {path.resolve() for path in candidate.paths}
    if shared:
        raise GymbenchError(
            f"nothing to compare against: {baseline_spec!r} and {candidate_spec!r} are the same run "
            f"({baseline.label}); save another run first, or name two different runs"
        )
    noise = noise_for(args.results_dir, key, args.calibration)
    return gate_or_explain(lambda: run_gate(baseline, candidate, settings, noise, args.fail_on), baseline, candidate)


def _publish(result: GateResult, args: argparse.Namespace) -> None:
    print("\n".join(comparison_lines(result, verbose=args.verbose)))
    markdown = comparison_markdown(result)
    if args.markdown:
        write_report(markdown, args.markdown)
    write_step_summary(markdown)


def _run_compare(args: argparse.Namespace, plugins: Plugins) -> int:
    if args.markdown:
        check_writable_file(args.markdown, "markdown summary", "--markdown")
    if args.ab:
        return _run_compare_ab(args)
    result = _gate(args, args.baseline, args.candidate or "latest")
    _publish(result, args)
    return result.enforced.cli_code


def _run_compare_ab(args: argparse.Namespace) -> int:
    """Both commits measured now, interleaved; A/B calibration (``calibrate --ab``) gives the noise."""
    from gymbench.gate.ab.gate import ab_gate
    from gymbench.gate.ab.settings import ABSettings
    from gymbench.settings import settings_from_args

    settings = compare_settings(
        Path("pyproject.toml"),
        min_effect=args.min_effect,
        alpha=args.alpha,
        metrics=tuple(args.metrics) if args.metrics else None,
    )
    noise = noise_for(args.results_dir, machine_info()["key"], args.calibration, AB_CALIBRATION_DIR)
    pytest_args = [*(args.bench or ["benches"]), *(["-k", args.keyword] if args.keyword else [])]
    ab = settings_from_args(ABSettings, args)
    result = ab_gate(Path.cwd(), args.baseline, args.candidate, pytest_args, ab, settings, noise, args.fail_on)
    _publish(result, args)
    return result.enforced.cli_code


DEFAULT_SUITE = ["benches/"]


def _run_gate(args: argparse.Namespace, plugins: Plugins) -> int:
    """``gymbench gate --base REF``: both commits counted, each importing its own code, then gated."""
    from gymbench.gate.base_run import gate_against_base

    if args.markdown:
        check_writable_file(args.markdown, "markdown summary", "--markdown")
    settings = compare_settings(
        Path("pyproject.toml"),
        min_effect=args.min_effect,
        alpha=args.alpha,
        metrics=tuple(args.metrics) if args.metrics else None,
    )
    pytest_args = [*(args.pytest_args or DEFAULT_SUITE), *(["-k", args.keyword] if args.keyword else [])]
    pytest_args += ["--gymbench-instructions-brackets", str(args.brackets)]
    result, runs = gate_against_base(
        Path.cwd(), args.base, pytest_args, settings, args.fail_on, args.results_dir, args.calibration
    )
    for run in runs:
        print(f"counted {run.selection.label} in {run.seconds:.0f} s")
    _publish(result, args)
    return result.enforced.cli_code


def _run_calibrate(args: argparse.Namespace, plugins: Plugins) -> int:
    args.ab, args.pytest_args = ab_ref_and_suite(args.ab, args.pytest_args)
    if args.ab is not None:
        return _run_calibrate_ab(args)
    store = BaselineStore(args.results_dir)
    key = machine_info()["key"]
    spec = args.source
    if spec is None:
        names = rerun_suite(args.pytest_args, 5 if args.runs is None else args.runs, args.name, args.results_dir)
        spec = f"{args.name}-[0-9][0-9][0-9]"
        print(f"ran the suite {len(names)} times")
    selection = store.select(spec, key)
    noise = learn_noise(selection.records, key, source=spec)
    path = save_calibration(noise, args.results_dir, args.name, utc_now())
    settings = compare_settings(Path("pyproject.toml"), min_effect=args.min_effect)
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


def _run_calibrate_ab(args: argparse.Namespace) -> int:
    """A/A worker pairs of one commit; each metric's noise and the effect the A/B gate can then see."""
    from gymbench.gate.ab.gate import calibrate_ab
    from gymbench.gate.ab.settings import ABSettings
    from gymbench.settings import settings_from_args

    key = machine_info()["key"]
    ab = settings_from_args(ABSettings, args, base={"repeats": args.runs or 10})
    pytest_args = [*args.pytest_args, *(["-k", args.keyword] if args.keyword else [])]
    noise, data = calibrate_ab(Path.cwd(), args.ab or None, pytest_args, ab, key)
    if not noise.metrics:
        raise GymbenchError(
            f"no benchmark of {' '.join(pytest_args)} was measured in {ab.repeats} A/A worker pairs "
            "(A/B calibration needs at least 3 pairs and benchmarks that call gymbench.measure)"
        )
    path = save_calibration(noise, args.results_dir, args.name, utc_now(), AB_CALIBRATION_DIR)
    settings = compare_settings(Path("pyproject.toml"), min_effect=args.min_effect)
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
    inputs = [spec for spec in (args.baseline, args.candidate) if spec and Path(spec).exists()]  # files, not names
    refuse_inputs(args.output, inputs)
    check_writable_file(args.output, "report", "-o")
    if args.markdown:
        refuse_inputs(args.markdown, [*inputs, args.output], "--markdown")
        check_writable_file(args.markdown, "markdown summary", "--markdown")
    single = _single_run(args)
    if single is not None:
        path = write_report(render_run_report(single), args.output)
        print(f"report on {single.kind} run {single.name} written to {path}")
        return 0
    store = BaselineStore(args.results_dir)
    key = machine_info()["key"]
    runs = store.runs(key) or store.runs()
    baseline = args.baseline
    if baseline is None:
        if len(runs) < 2:
            raise GymbenchError(
                f"{args.results_dir}/ holds {len(runs)} run(s); a report needs a baseline and a candidate"
            )
        baseline = str(runs[-2].path)
    result = _gate(args, baseline, args.candidate)
    path = write_report(render_report(result, runs, args.history_metric), args.output)
    _publish(result, args)
    print(f"report written to {path}")
    return result.enforced.cli_code


def _single_run(args: argparse.Namespace) -> ResultsRecord | None:
    """The record of ``gymbench report RUN`` when it is one collection or tuning sweep and there is
    nothing to compare it with: a record file, a saved run's name that is also the latest run, or,
    with no run named, the store's only run. A report of a run against itself would say nothing."""
    if args.candidate != "latest":
        return None
    path = Path(args.baseline) if args.baseline else None
    if path is None or not path.is_file():
        store = BaselineStore(args.results_dir)
        key = machine_info()["key"]
        runs = store.runs(key) or store.runs()
        try:
            named = store.select(args.baseline, key) if args.baseline else None
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
    store = BaselineStore(args.results_dir)
    runs = store.runs(None if args.all_machines else machine_info()["key"])
    rows = [("stamp", "name", "machine", "commit", "path")]
    rows += [(r.stamp, r.name, r.machine_key, _commit(r)[:10], str(r.path)) for r in runs]
    print("\n".join(table(rows)) if runs else f"no saved runs in {args.results_dir}/ for this machine")
    return 0


def _commit(run: StoredRun) -> str:
    """A listing shows every file: one that cannot be read is marked, with a warning naming it."""
    try:
        return run.commit or "-"
    except ResultsFileError as exc:
        print(f"gymbench: warning: {exc}", file=sys.stderr)
        return "(unreadable)"


def _run_import(args: argparse.Namespace, plugins: Plugins) -> int:
    record = load_pytest_benchmark(args.path)
    name = args.name or record.name
    imported = ResultsRecord(name, record.benchmarks, record.fingerprint, record.created_at, record.kind)
    validate_record_dict(imported.to_dict(), str(args.path))  # a problem names the file it came from
    with Run(plugins, "import", name, {"path": str(args.path)}, results_dir=args.results_dir) as run:
        run.finish(imported)
    print(f"imported {len(record.benchmarks)} benchmarks from {args.path}")
    return 0


def _run_export(args: argparse.Namespace, plugins: Plugins) -> int:
    refuse_inputs(args.output, [args.path])
    check_writable_file(args.output, "export", "-o")
    record = load_any(args.path)
    data, skipped = to_pytest_benchmark(record, args.metric), left_out(record, args.metric)
    for bench_id, metrics in skipped.items():
        others = f"; it has {', '.join(metrics)} (export one with --metric NAME)" if metrics else ""
        print(f"gymbench: warning: left out {bench_id}: no {args.metric!r} metric{others}", file=sys.stderr)
    if not data["benchmarks"]:
        raise GymbenchError(
            f"{args.path}: no benchmark has a {args.metric!r} metric, so nothing was exported; "
            f"choose one of its metrics with --metric ({', '.join(_metric_names(skipped)) or 'it has none'})"
        )
    with AtomicFile(args.output, text=True, then="; choose another -o") as out:  # never half an export
        out.write(json.dumps(data, indent=1) + "\n")
    print(
        f"exported {len(data['benchmarks'])} benchmarks to {args.output}"
        + (f", left out {len(skipped)}" if skipped else "")
    )
    return 0


def _metric_names(left_out: dict[str, list[str]]) -> list[str]:
    return sorted({name for metrics in left_out.values() for name in metrics})
