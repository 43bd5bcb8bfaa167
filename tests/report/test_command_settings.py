"""The comparison and report commands read their settings as every command does: ``+key=value``,
``--config FILE`` and ``--flag``, all generated from one settings schema per command."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from gymbench.cli import build_parser, main
from gymbench.gate.noise import noise_to_dict
from gymbench.gate.store import save_json
from gymbench.testing import make_plugins
from tests.gate.synthetic import calibration, save_run, suite

NOISE = ["--calibration", "quiet.json", "--results-dir", "results"]


@pytest.fixture
def two_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs ``a`` and ``b`` of one suite, ``b`` 50% slower on one benchmark, and a calibration."""
    monkeypatch.chdir(tmp_path)
    save_run(tmp_path / "results", suite(1, name="a"), "20260101T000000")
    save_run(tmp_path / "results", suite(2, name="b", slow={0: 0.5}), "20260102T000000")
    save_json(noise_to_dict(calibration(suite(1)), "2026-01-01T00:00:00+00:00"), tmp_path / "quiet.json")
    return tmp_path


def test_compare_takes_plus_key_value_settings_before_or_after_the_runs(two_runs: Path) -> None:
    assert main(["compare", "a", "b", *NOISE]) == 1  # a 50% slowdown regresses at the default 5%
    assert main(["compare", "a", "b", "+min_effect=0.9", *NOISE]) == 0
    assert main(["compare", "+min_effect=0.9", "a", "b", *NOISE]) == 0
    assert main(["compare", "a", "b", "min_effect=0.9", *NOISE]) == 0  # the + is optional
    assert main(["compare", "a", "b", "--min-effect", "0.9", *NOISE]) == 0


def test_compare_reads_a_config_file(two_runs: Path) -> None:
    (two_runs / "gate.yaml").write_text("min_effect: 0.9\nfail_on: regression\n")
    assert main(["compare", "a", "b", "--config", "gate.yaml", *NOISE]) == 0
    (two_runs / "strict.json").write_text('{"min_effect": 0.01}')
    assert main(["compare", "a", "b", "--config", "strict.json", *NOISE]) == 1


def test_the_flag_wins_over_the_file_and_the_file_over_pyproject(two_runs: Path) -> None:
    (two_runs / "pyproject.toml").write_text("[tool.gymbench.compare]\nmin_effect = 0.9\n")
    assert main(["compare", "a", "b", *NOISE]) == 0
    (two_runs / "strict.yaml").write_text("min_effect: 0.01\n")
    assert main(["compare", "a", "b", "--config", "strict.yaml", *NOISE]) == 1
    assert main(["compare", "a", "b", "--config", "strict.yaml", "+min_effect=0.9", *NOISE]) == 0


def test_a_bad_setting_is_one_line_naming_it(two_runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "a", "b", "+min_efect=0.1", *NOISE]) == 2
    assert "unknown setting 'min_efect'" in capsys.readouterr().err
    assert main(["compare", "a", "b", "--fail-on", "sometimes", *NOISE]) == 2
    assert (
        "setting 'fail_on': got 'sometimes', expected one of none, regression, inconclusive" in capsys.readouterr().err
    )
    assert main(["compare", *NOISE]) == 2
    assert "setting 'baseline'" in capsys.readouterr().err


def test_the_old_spellings_still_work(two_runs: Path) -> None:
    from gymbench.gate.command_settings import CompareCommand
    from gymbench.settings import settings_from_args

    argv = ["compare", "-v", "a", "b", "--no-shift-correction", "--metric", "time", "--metric", "rate", *NOISE]
    assert main(argv) == 1
    args = build_parser(make_plugins(), "compare").parse_args(argv)
    settings = settings_from_args(CompareCommand, args)
    assert (settings.verbose, settings.correct_shift, settings.metrics) == (True, False, ("time", "rate"))
    assert (settings.baseline, settings.candidate, settings.results_dir) == ("a", "b", "results")


COMMANDS = {
    "compare": "gymbench.gate.command_settings:CompareCommand",
    "gate": "gymbench.gate.command_settings:GateCommand",
    "calibrate": "gymbench.gate.command_settings:CalibrateCommand",
    "report": "gymbench.report.settings:ReportCommand",
    "baselines": "gymbench.report.settings:BaselinesCommand",
    "import": "gymbench.report.settings:ImportCommand",
    "export": "gymbench.report.settings:ExportCommand",
    "timings": "gymbench.report.settings:TimingsCommand",
}
HAND_WRITTEN = {"calibrate": {"ab"}}
"""The only flag not generated: ``calibrate --ab [REF]``, a flag whose value is optional."""


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_flag_of_the_command_is_a_setting_of_its_schema(command: str) -> None:
    from importlib import import_module

    module, name = COMMANDS[command].split(":")
    fields = {field.name for field in dataclasses.fields(getattr(import_module(module), name))}
    parser = build_parser(make_plugins(), command)
    sub = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction)).choices[command]
    dests = {action.dest for action in sub._actions if action.option_strings} - {"help", "settings_file"}
    flags = {dest.removeprefix("setting_") for dest in dests}
    assert flags - HAND_WRITTEN.get(command, set()) <= fields


def test_a_new_setting_becomes_a_flag_and_a_key_without_a_line_of_parser_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gymbench.report import settings as report_settings
    from gymbench.settings import settings_from_args

    @dataclasses.dataclass
    class Wider(report_settings.BaselinesCommand):
        width: int = dataclasses.field(default=80, metadata={"help": "columns"})

    monkeypatch.setattr(report_settings, "BaselinesCommand", Wider)
    parser = build_parser(make_plugins(), "baselines")
    args = parser.parse_args(["baselines", "--width", "100"])
    assert settings_from_args(Wider, args).width == 100
    args = parser.parse_args(["baselines", "+width=120"])
    assert settings_from_args(Wider, args).width == 120
