"""What the gate's commands do: ``compare`` (two stored runs, or ``--ab`` two commits measured now),
``gate`` (instruction counts of two commits) and ``calibrate`` (the noise of this machine). Their
settings come from :mod:`gymbench.gate.command_settings`; ``report`` reuses the comparison and its
publication from here.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TypeVar

from gymbench.console import printable
from gymbench.errors import GymbenchError
from gymbench.fingerprint import machine_info
from gymbench.gate.calibrate import learn_noise, rerun_suite
from gymbench.gate.command_settings import CalibrateCommand, CompareCommand, GateCommand, Published, VerdictSettings
from gymbench.gate.compare import detectable_change
from gymbench.gate.gate import GateResult, Outcome, noise_for, run_gate
from gymbench.gate.guarded import gate_or_explain
from gymbench.gate.markdown import comparison_markdown, write_step_summary
from gymbench.gate.noise import NoiseTable
from gymbench.gate.paired import paired_detectable_change
from gymbench.gate.settings import CompareSettings, settings_from_pyproject
from gymbench.gate.store import AB_CALIBRATION_DIR, BaselineStore, save_calibration
from gymbench.gate.terminal import comparison_lines, table
from gymbench.jsonio import AtomicFile, check_writable_file
from gymbench.measure import INSTRUCTIONS_UNIT
from gymbench.record import utc_now

S = TypeVar("S")


def command_settings(schema: type[S], args: argparse.Namespace) -> S:
    """A command's settings: defaults ← ``[tool.gymbench.compare]`` of ./pyproject.toml (the comparison's
    own settings) ← ``--config`` ← ``+key=value`` ← flags."""
    from gymbench.settings import SettingsFile, build_settings, settings_from_args

    pyproject = Path("pyproject.toml")
    base = (
        SettingsFile(settings_from_pyproject(pyproject), str(pyproject)) if issubclass(schema, CompareSettings) else {}
    )
    if base:  # the file's values checked on their own first, so a bad one names the file it is in
        try:
            build_settings(schema, (), base)
        except GymbenchError as exc:  # only the file's own settings: a missing positional is the command line's
            if any(key in str(exc) for key in base):
                raise GymbenchError(f"{pyproject} [tool.gymbench.compare]: {exc}") from None
    return settings_from_args(schema, args, base=base)


def gate_stored_runs(settings: VerdictSettings, baseline_spec: str, candidate_spec: str) -> GateResult:
    """Two stored runs (names, globs, files, refs) compared and judged, as ``compare`` and ``report`` do."""
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


def publish(result: GateResult, settings: Published) -> None:
    """The verdict on the terminal, in ``--markdown FILE`` and in GitHub's job summary."""
    print("\n".join(comparison_lines(result, verbose=settings.verbose)))
    markdown = comparison_markdown(result)
    if settings.markdown:
        with AtomicFile(Path(settings.markdown), text=True, then="; choose another --markdown") as out:
            out.write(markdown)
    write_step_summary(markdown)


def run_compare(args: argparse.Namespace) -> int:
    settings = command_settings(CompareCommand, args)
    if settings.markdown:
        check_writable_file(Path(settings.markdown), "markdown summary", "--markdown")
    if settings.ab:
        return _run_compare_ab(settings)
    result = gate_stored_runs(settings, str(settings.baseline), settings.candidate or "latest")
    publish(result, settings)
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
    publish(result, settings)
    return result.enforced.cli_code


DEFAULT_SUITE = ["benches/"]


def run_gate_command(args: argparse.Namespace) -> int:
    """``gymbench gate --base REF``: both commits counted, each importing its own code, then gated."""
    from gymbench.gate.base_run import gate_against_base

    settings = command_settings(GateCommand, args)
    if settings.markdown:
        check_writable_file(Path(settings.markdown), "markdown summary", "--markdown")
    pytest_args = [*(settings.pytest_args or DEFAULT_SUITE), *(["-k", settings.keyword] if settings.keyword else [])]
    pytest_args += ["--gymbench-instructions-brackets", str(settings.brackets)]
    result, runs = gate_against_base(
        Path.cwd(), str(settings.base), pytest_args, settings, settings.fail_on, Path(settings.results_dir),
        settings.calibration,
    )  # fmt: skip
    for run in runs:
        print(printable(f"counted {run.selection.label} in {run.seconds:.0f} s"))
        print(printable(run.import_check))
    publish(result, settings)
    return _uncounted_exit(result, settings.fail_on_uncounted)


def _uncounted_exit(result: GateResult, fail_on_uncounted: bool) -> int:
    """The counts' exit status, or 3 (inconclusive) with ``--fail-on-uncounted`` when a benchmark
    went uncounted: its timed change is shown, but no count vouches for it."""
    uncounted = result.suite.uncounted
    if not (fail_on_uncounted and uncounted) or result.enforced.cli_code != 0:
        return result.enforced.cli_code
    names = ", ".join(u.benchmark for u in uncounted)
    print(
        printable(f"exit {Outcome.INCONCLUSIVE.cli_code}: {len(uncounted)} not counted (--fail-on-uncounted): {names}")
    )
    return Outcome.INCONCLUSIVE.cli_code


def run_calibrate(args: argparse.Namespace) -> int:
    settings = command_settings(CalibrateCommand, args)
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
        print(printable(f"not measured: {skipped.what}: {skipped.why}"))
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
    print("\n".join(printable(line) for line in table(rows)))  # benchmark ids come from records
