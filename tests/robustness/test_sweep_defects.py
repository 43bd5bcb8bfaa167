"""The five defects the first full generated sweep left (tests/fuzz, ``KNOWN_DEFECTS``), each one
line now. The full sweep runs only with ``GYMBENCH_FUZZ_FULL=1``, so each keeps a test here."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymbench.builtin.arrivals import read_trace
from gymbench.cli import main
from gymbench.errors import GymbenchError


def one_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("gymbench: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("command", [["report"], ["calibrate", "--from", "x"]])
def test_a_results_folder_name_too_long_to_list_is_one_line(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_error([*command, f"+results_dir={tmp_path / ('n' * 300)}"], capsys)
    assert "choose another +results_dir" in line


@pytest.mark.parametrize("setting", ["baseline", "candidate"])
def test_a_run_spec_too_long_for_a_path_is_read_as_a_name(
    setting: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_error(["report", f"+{setting}={'x' * 5000}", f"+results_dir={tmp_path / 'results'}"], capsys)
    assert "run" in line


def test_a_list_inside_a_list_of_files_is_refused_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_error(["merge-rollouts", "+files=[1, [2]]", "-o", str(tmp_path / "m.jsonl")], capsys)
    assert "setting 'files': every item must be a word, got list [2]" in line
    assert not (tmp_path / "m.jsonl").exists()


def test_a_trace_line_nested_past_the_parser_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text("0.5\n" + "[" * 100_000 + "\n")
    with pytest.raises(GymbenchError, match=rf"{trace}:2"):
        read_trace(trace)
