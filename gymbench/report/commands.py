"""The baseline and report commands' plugin: ``compare``, ``calibrate``, ``report``, ``baselines``,
``import`` and ``export``.

Registration and option parsing only; each command's work (and scipy with it) is imported from
:mod:`gymbench.report.store_commands` when it runs, and a schema when its command's parser is built.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gymbench.hookspecs import hookimpl
from gymbench.types import Command

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


def _lazy_run(name: str) -> Callable[[argparse.Namespace, Plugins], int]:
    def run(args: argparse.Namespace, plugins: Plugins) -> int:
        from gymbench.report import store_commands

        result: int = getattr(store_commands, name)(args, plugins)
        return result

    return run


def _add_store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results-dir", type=Path, default=Path("results"), help="the store (default: results/)")


def _add_compare_options(parser: argparse.ArgumentParser, fail_on_default: str) -> None:
    from gymbench.gate.settings import FAIL_ON

    _add_store_options(parser)
    parser.add_argument("--min-effect", type=float, help="smallest change that matters, 0.05 = 5%% (default 0.05)")
    parser.add_argument("--alpha", type=float, help="false-discovery rate across the suite (default 0.01)")
    parser.add_argument("--metric", action="append", dest="metrics", help="compare only this metric (repeatable)")
    parser.add_argument("--calibration", help="a calibration file (default: this machine's latest)")
    parser.add_argument("--no-shift-correction", action="store_true", help="report the suite-wide shift only")
    parser.add_argument("--fail-on", choices=FAIL_ON, default=fail_on_default, help="what fails the exit code")
    parser.add_argument("--markdown", type=Path, help="also write the markdown summary to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="list passing metrics too")


def _configure_compare(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", help="results file, pytest-benchmark JSON, run name, name glob, git ref, or latest")
    parser.add_argument(
        "candidate", nargs="?", default=None, help="the same kinds (default: latest; with --ab: the working tree)"
    )
    _add_compare_options(parser, fail_on_default="inconclusive")
    ab = parser.add_argument_group(
        "interleaved A/B (--ab BASE_REF [CANDIDATE_REF]): both commits' benchmarks in two worker processes "
        "on one CPU, round by round"
    )
    ab.add_argument("--ab", action="store_true", help="measure two git refs now, interleaved, not stored runs")
    _add_ab_options(ab)


def _add_ab_options(group: Any) -> None:
    from gymbench.gate.ab.settings import ABSettings
    from gymbench.settings import add_settings_flags

    group.add_argument("--bench", action="append", metavar="PATH", help="benchmark files or folders (default: benches)")
    group.add_argument("-k", dest="keyword", metavar="EXPR", help="pytest -k expression selecting benchmarks")
    add_settings_flags(group, ABSettings)


def _configure_calibrate(parser: argparse.ArgumentParser) -> None:
    _add_store_options(parser)
    parser.add_argument("--runs", type=int, help="reruns of the suite (default 5), or A/A worker pairs with --ab (10)")
    parser.add_argument("--name", default="calibration", help="save name of the reruns and the calibration")
    parser.add_argument("--from", dest="source", help="use stored runs instead (a name glob or git ref)")
    parser.add_argument("--min-effect", type=float, help="report which metrics can see this effect")
    parser.add_argument("pytest_args", nargs="*", default=[], help="the suite (default: benches/)")
    ab = parser.add_argument_group("interleaved A/B: the same commit on both sides (A/A) gives the A/B gate its noise")
    ab.add_argument(
        "--ab", nargs="?", const="", metavar="REF", help="calibrate the A/B gate on REF (default: the working tree)"
    )
    ab.add_argument("-k", dest="keyword", metavar="EXPR", help="pytest -k expression selecting benchmarks")
    from gymbench.gate.ab.settings import ABSettings
    from gymbench.settings import add_settings_flags

    add_settings_flags(ab, ABSettings, skip=("repeats",))


def _configure_gate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base", required=True, metavar="REF", help="the commit to gate against (e.g. the merge base)")
    parser.add_argument("pytest_args", nargs="*", default=[], help="the suite and pytest options (default: benches/)")
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="count only the benchmarks this -k selects")
    parser.add_argument(
        "--brackets", type=int, default=5, help="counted brackets per benchmark (default 5, at least 3 uncalibrated)"
    )
    _add_compare_options(parser, fail_on_default="inconclusive")


def _configure_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "baseline",
        nargs="?",
        help="as for compare (default: the run before the candidate); alone, a collect or tune record (its file, "
        "the latest run's name, or the store's only run): a report on that run (percentiles, over time, "
        "stages, the server's /metrics)",
    )
    parser.add_argument("candidate", nargs="?", default="latest", help="as for compare (default: latest)")
    parser.add_argument(
        "-o", "--output", type=Path, default=Path("gymbench-report.html"),
        help="the HTML file to write (default: gymbench-report.html; self-contained, plots inline)",
    )  # fmt: skip
    parser.add_argument(
        "--history-metric",
        help="metric for the history and sample plots (default: each benchmark's headline metric, time "
        "where it has one, relative to the baseline, so every benchmark shows)",
    )
    _add_compare_options(parser, fail_on_default="inconclusive")  # the same verdict and exit code as compare


def _configure_baselines(parser: argparse.ArgumentParser) -> None:
    _add_store_options(parser)
    parser.add_argument("--all-machines", action="store_true", help="not only this machine's runs")


def _configure_import(parser: argparse.ArgumentParser) -> None:
    _add_store_options(parser)
    parser.add_argument("path", type=Path, help="a pytest-benchmark JSON file (--benchmark-json)")
    parser.add_argument("--name", help="save name (default: the file's name)")


def _configure_export(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="a gymbench results file")
    parser.add_argument("-o", "--output", type=Path, required=True, help="pytest-benchmark JSON to write")
    parser.add_argument("--metric", default="time", help="the metric pytest-benchmark sees as its timing")


def _configure_timings(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="a rollouts file (the output_jsonl_fpath of gymbench collect)")
    parser.add_argument("-o", "--output", type=Path, help="file to write (default: standard output)")
    parser.add_argument("--format", choices=("csv", "json"), default="csv", help="csv (default) or json")


def _run_timings(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.jsonio import check_writable_file
    from gymbench.report.timings import run_timings

    if args.output is not None:
        check_writable_file(args.output, "timings export", "-o")
    count = run_timings(args.path, args.output, args.format)
    if args.output is not None:
        print(f"wrote the timings of {count} rollouts to {args.output} ({args.format})")
    return 0


@hookimpl
def gymbench_register_commands() -> list[Command]:
    return [
        Command("compare", "compare two runs; exit 0 pass, 1 regression, 3 inconclusive, 2 error",
                _configure_compare, _lazy_run("_run_compare")),
        Command("gate", "count instructions of --base REF (its own worktree and code) and of this checkout, then gate",
                _configure_gate, _lazy_run("_run_gate")),
        Command("calibrate", "rerun a suite unchanged (A/A) to learn each benchmark's noise on this machine",
                _configure_calibrate, _lazy_run("_run_calibrate")),
        Command("report", "write a self-contained HTML report with plots from stored results",
                _configure_report, _lazy_run("_run_report")),
        Command("baselines", "list the saved runs a comparison can use",
                _configure_baselines, _lazy_run("_run_baselines")),
        Command("import", "import a pytest-benchmark JSON file into the results store",
                _configure_import, _lazy_run("_run_import")),
        Command("export", "write a gymbench results file in pytest-benchmark's JSON format",
                _configure_export, _lazy_run("_run_export")),
        Command("timings", "per-rollout timings (TTFT, ITL, TPOT, e2e, stages) of a rollouts file as CSV or JSON",
                _configure_timings, _run_timings),
    ]  # fmt: skip
