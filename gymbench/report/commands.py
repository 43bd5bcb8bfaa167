"""The report commands' plugin: ``report``, ``baselines``, ``import``, ``export`` and ``timings`` (the
gate's own, ``compare``, ``gate`` and ``calibrate``, are :mod:`gymbench.gate.commands`).

Registration only: each command's flags, ``+key=value`` and ``--config`` keys are generated from its
settings schema (:mod:`gymbench.gate.settings`, :mod:`gymbench.report.settings`), imported when its
parser is built; its work (and scipy with it) from :mod:`gymbench.report.store_commands` when it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gymbench.hookspecs import hookimpl
from gymbench.settings import settings_parser
from gymbench.types import Command

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


def _lazy_run(name: str) -> Callable[[argparse.Namespace, Plugins], int]:
    def run(args: argparse.Namespace, plugins: Plugins) -> int:
        from gymbench.report import store_commands

        result: int = getattr(store_commands, name)(args, plugins)
        return result

    return run


def _run_timings(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.jsonio import check_writable_file
    from gymbench.report.settings import TimingsCommand
    from gymbench.report.timings import run_timings
    from gymbench.settings import settings_from_args

    settings = settings_from_args(TimingsCommand, args)
    output = Path(settings.output) if settings.output is not None else None
    if output is not None:
        check_writable_file(output, "timings export", "-o")
    count = run_timings(Path(str(settings.path)), output, settings.format)
    if output is not None:
        print(f"wrote the timings of {count} rollouts to {output} ({settings.format})")
    return 0


@hookimpl
def gymbench_register_commands() -> list[Command]:
    return [
        Command("report", "write a self-contained HTML report with plots from stored results",
                settings_parser("gymbench.report.settings:ReportCommand"), _lazy_run("_run_report")),
        Command("baselines", "list the saved runs a comparison can use",
                settings_parser("gymbench.report.settings:BaselinesCommand"), _lazy_run("_run_baselines")),
        Command("import", "import a pytest-benchmark JSON file into the results store",
                settings_parser("gymbench.report.settings:ImportCommand"), _lazy_run("_run_import")),
        Command("export", "write a gymbench results file in pytest-benchmark's JSON format",
                settings_parser("gymbench.report.settings:ExportCommand"), _lazy_run("_run_export")),
        Command("timings", "per-rollout timings (TTFT, ITL, TPOT, e2e, stages) of a rollouts file as CSV or JSON",
                settings_parser("gymbench.report.settings:TimingsCommand"), _run_timings),
    ]  # fmt: skip
