"""A refused command leaves no folder behind (issue 41, found by the generated sweep in tests/fuzz).

``gymbench tune`` and ``diagnose`` refused for a missing input left an empty ``./results`` (the
results record's writability check made it); ``timings -o DIR/new/x.json`` of a missing input left
``DIR/new`` (the atomic writer made it before the rows were read).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gymbench.cli import main


@pytest.mark.parametrize("command", ["tune", "diagnose"])
def test_a_probe_command_refused_for_its_input_leaves_no_results_folder(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([command, "+progress=false", f"+results_dir={tmp_path / 'a' / 'results'}"]) == 2
    assert "needs +input_jsonl_fpath" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_timings_of_a_missing_file_leaves_no_output_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["timings", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "new" / "deeper" / "x.json")]) == 2
    assert "cannot read the rollouts file" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_results_folder_that_was_there_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "results").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["tune", "+progress=false"]) == 2
    assert (tmp_path / "results").is_dir()
