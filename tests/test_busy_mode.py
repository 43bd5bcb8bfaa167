"""``python -m gymbench.devtools.busy``: pytest beside CPU hogs, its exit status passed on, the hogs stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gymbench.devtools import busy


def test_pytest_runs_beside_hogs_that_are_stopped_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[subprocess.Popen[bytes]] = []
    real_start = busy.start_hogs

    def spy(count: int) -> list[subprocess.Popen[bytes]]:
        started.extend(real_start(count))
        return started

    monkeypatch.setattr(busy, "start_hogs", spy)
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    pass\n")
    (tmp_path / "test_bad.py").write_text("def test_bad():\n    assert False\n")
    report = tmp_path / "busy.json"
    base = ["-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    assert busy.main(["--hogs", "1", "--report", str(report), "--", *base, str(tmp_path / "test_ok.py")]) == 0
    assert len(started) == 1 and started[0].poll() is not None  # the hog ran and was stopped
    figures = json.loads(report.read_text())
    assert figures["hogs"] == 1 and figures["exit_status"] == 0 and figures["wall_s"] >= 0
    assert busy.main(["--hogs", "1", "--", *base, str(tmp_path / "test_bad.py")]) == 1


def test_the_module_runs_as_a_script(tmp_path: Path) -> None:
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    pass\n")
    done = subprocess.run(
        [sys.executable, "-m", "gymbench.devtools.busy", "--hogs", "0", "--", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path / "test_ok.py")],
        capture_output=True, text=True, env={**os.environ}, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and "busy mode: 0 CPU hogs" in done.stdout
