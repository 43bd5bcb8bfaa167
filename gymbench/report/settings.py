"""Settings of the report commands (``report``, ``baselines``, ``import``, ``export``, ``timings``),
read like every other command's: ``+key=value``, ``--key value``, ``--config FILE``.

Imported when one of these commands' parser is built, not when the plugin is registered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gymbench.gate.command_settings import VerdictSettings
from gymbench.gate.settings import TwoRuns
from gymbench.settings import InputFile, OutputFile, ResultsStore, SaveRecord, doc, one_of, require, with_defaults

TIMINGS_FORMATS = ("csv", "json")


@dataclass
class ReportCommand(TwoRuns, VerdictSettings, OutputFile):
    """``gymbench report [BASELINE] [CANDIDATE] -o FILE.html``: the comparison's verdict and exit code as
    HTML (the baseline defaults to the run before the candidate); one collect or tune record alone (its
    file, the latest run's name, or the store's only run): a report on that run."""

    history_metric: str | None = field(
        default=None,
        metadata=doc(
            "metric for the history and sample plots (default: each benchmark's headline metric, time "
            "where it has one, relative to the baseline, so every benchmark shows)"
        ),
    )


ReportCommand = with_defaults(  # type: ignore[misc]
    ReportCommand,
    {"output": "the HTML file to write (default: gymbench-report.html; self-contained, plots inline)"},
    output="gymbench-report.html",
)


@dataclass
class BaselinesCommand(ResultsStore):
    all_machines: bool = field(default=False, metadata=doc("not only this machine's runs"))


@dataclass
class ImportCommand(InputFile, SaveRecord, ResultsStore):
    """``gymbench import BENCH.json``: a pytest-benchmark JSON file (--benchmark-json) into the store."""


ImportCommand = with_defaults(  # type: ignore[misc]
    ImportCommand,
    {"path": "a pytest-benchmark JSON file (--benchmark-json)", "save": "save name (default: the file's name)"},
    flags={"save": ("--name",)},
)


@dataclass
class ExportCommand(InputFile, OutputFile):
    """``gymbench export RESULTS -o BENCH.json``."""

    metric: str = field(default="time", metadata=doc("the metric pytest-benchmark sees as its timing"))

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.output is not None, "output", None, "a file to write: -o FILE.json")


ExportCommand = with_defaults(  # type: ignore[misc]
    ExportCommand, {"path": "a gymbench results file", "output": "pytest-benchmark JSON to write (required)"}
)


@dataclass
class TimingsCommand(InputFile, OutputFile):
    """``gymbench timings ROLLOUTS.jsonl [-o FILE]`` (default: standard output)."""

    format: str = field(default="csv", metadata=doc("csv (default) or json"))

    def __post_init__(self) -> None:
        super().__post_init__()
        one_of("format", self.format, TIMINGS_FORMATS)


TimingsCommand = with_defaults(  # type: ignore[misc]
    TimingsCommand,
    {
        "path": "a rollouts file (the output_jsonl_fpath of gymbench collect)",
        "output": "file to write (default: standard output)",
    },
)
