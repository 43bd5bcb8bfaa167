"""A clone stays clean after the README's commands: outputs ignored, baselines and calibrations kept."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IGNORED = ("rollouts.jsonl", "rollouts.jsonl.metrics.json", "rollouts.jsonl.run.json", "out.jsonl.metrics.json",
           "rollouts_aggregate_metrics.json", "gymbench-report.html", "results/0123456789ab/20260101T000000_first.json",
           "results/0123456789ab/20260101T000000_collect.json")  # fmt: skip
KEPT = ("results/0123456789ab/20260101T000000_baseline.json",
        "results/0123456789ab/calibration/20260101T000000_calibration.json", "results/README.md")  # fmt: skip


def ignored(paths: tuple[str, ...]) -> set[str]:
    done = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True)
    return set(done.stdout.split())


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_run_outputs_are_ignored_and_baselines_are_not() -> None:
    assert ignored(IGNORED) == set(IGNORED)
    assert ignored(KEPT) == set()
