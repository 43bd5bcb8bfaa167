"""The example's CI workflow installs gymbench the way a user without a package index can."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

WORKFLOW = Path(__file__).resolve().parent.parent / "examples" / "mathenv" / ".github" / "workflows" / "bench.yml"


def install_lines() -> list[str]:
    jobs = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"].values()
    steps = [step for job in jobs for step in job["steps"]]
    commands = [line.strip() for step in steps for line in str(step.get("run", "")).splitlines()]
    return [line for line in commands if line.startswith("pip install")]


def test_gymbench_comes_from_a_git_url_or_a_path_not_an_index() -> None:
    lines = install_lines()
    assert lines
    for line in lines:
        names = re.findall(r"(?<![\w/.@-])gymbench(?:\[[\w,]+\])?(?=\s|$|\")", line)
        assert all("@" in line for _ in names), f"{line!r} asks a package index for gymbench, which is on none"
    assert any("gymbench" in line and "@" in line for line in lines)
