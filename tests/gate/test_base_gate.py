"""``gymbench gate --base REF`` and the record of measured code, on a tiny user project.

The project (tests/gate/toy_project.py) comes in a flat and a ``src/`` layout and is on
``PYTHONPATH`` as the pull request's checkout, the way an editable install puts it on sys.path:
that is what made the hand-made base run measure the pull request. The gate must still import
each commit's own package, so a deliberate 20 % slowdown fails and an A/A commit passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gymbench.errors import GymbenchError
from gymbench.gate.measured_code import foreign_imports, measured_code, project_packages, refuse_same_code
from gymbench.record import ResultsRecord
from tests.gate.synthetic import fingerprint
from tests.gate.toy_project import commit, git, import_root, make_project, package_dir

REPO_ROOT = Path(__file__).resolve().parents[2]


def as_installed(project: Path, layout: str) -> dict[str, str]:
    """This gymbench, then the project's package as an editable install would expose it."""
    return {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(import_root(project, layout))])}


def gymbench(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from gymbench.cli import main; raise SystemExit(main())", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, env={**os.environ, **env}, timeout=1200)


@pytest.mark.parametrize("layout", ["flat", "src"])
def test_measured_code_says_where_each_package_came_from(tmp_path: Path, layout: str) -> None:
    project = make_project(tmp_path / layout, layout)
    assert project_packages(project) == {"toyenv": package_dir(project, layout).resolve()}
    other = make_project(tmp_path / "other", layout)
    commit(other, layout, "slow", 0.2)

    class Module:
        __file__ = str(package_dir(other, layout) / "__init__.py")

    code = measured_code(project, {"toyenv": Module()})
    assert foreign_imports(code, project) == {"toyenv": str(package_dir(other, layout).resolve())}
    assert code["digest"] != code["source_digest"]  # it measured another checkout's (slower) code
    own = measured_code(other, {"toyenv": Module()})
    assert foreign_imports(own, other) == {} and own["digest"] == own["source_digest"]


def record(commit_id: str, digest: str, source_digest: str) -> ResultsRecord:
    measured_on = fingerprint()
    measured_on["commit"] = {"id": commit_id, "dirty": False, "branch": None}
    measured_on["code"] = {"imported": {"toyenv": "/pr/toyenv"}, "digest": digest, "source_digest": source_digest}
    return ResultsRecord("run", [], measured_on)


def test_identical_measured_code_from_different_checkouts_is_refused_in_one_line() -> None:
    with pytest.raises(GymbenchError, match=r"^refusing to compare: the baseline \(commit aaaa\)") as caught:
        refuse_same_code([record("aaaa", "d1", "s-base")], [record("bbbb", "d1", "s-pr")])
    assert "\n" not in str(caught.value) and "gymbench gate --base" in str(caught.value)
    refuse_same_code([record("aaaa", "d1", "s1")], [record("bbbb", "d1", "s1")])  # a docs-only change
    refuse_same_code([record("aaaa", "d1", "s1")], [record("aaaa", "d1", "s2")])  # one commit, dirty tree
    refuse_same_code([record("aaaa", "d1", "s1")], [record("bbbb", "d2", "s2")])  # a real change


@pytest.mark.slow
def test_the_hand_made_base_run_that_imports_the_pr_is_refused(tmp_path: Path) -> None:
    """The old recipe: a worktree of the base, the PR's package still first on sys.path, and the
    ``pytest`` script (``python -m pytest`` would put the worktree itself first)."""
    project = make_project(tmp_path / "flat", "flat")
    commit(project, "flat", "slow", 0.2)
    base_tree = tmp_path / "base-tree"
    git(project, "worktree", "add", "--detach", "--quiet", str(base_tree), "base")
    store = tmp_path / "results"
    pr_first = {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(project)])}
    for cwd, name in ((base_tree, "base"), (project, "pr")):
        done = subprocess.run(
            [str(Path(sys.executable).parent / "pytest"), "benches/", "-k", "parse", "-q", "-p", "no:cacheprovider",
             "--gymbench-quick", "--gymbench-save", name, "--gymbench-results-dir", str(store)],
            cwd=cwd, capture_output=True, text=True, env={**os.environ, **pr_first}, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    done = gymbench(project, "compare", "base", "pr", "--results-dir", str(store), env=pr_first)
    assert done.returncode == 2 and "refusing to compare" in done.stderr, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["flat", "src"])
def test_gate_base_fails_a_slowdown_and_passes_an_aa_commit(tmp_path: Path, layout: str) -> None:
    project = make_project(tmp_path / layout, layout)
    commit(project, layout, "slow", 0.2)
    env = as_installed(project, layout)
    args = ("gate", "--base", "base", "benches/", "-k", "parse or async", "--results-dir", str(tmp_path / "r"))
    done = gymbench(project, *args, env=env)
    assert done.returncode == 1, done.stdout + done.stderr  # 1: regression
    parse_row = next(line for line in done.stdout.splitlines() if "test_parse" in line)
    assert "instructions" in parse_row and "REGRESSED" in parse_row
    assert "test_score_async: not counted: asyncio" in done.stdout
    assert "gate: REGRESSION — 1 gated, 0 ungated (1 regressed)" in done.stdout
    assert "no calibration" not in done.stdout  # counts need none
    commit(project, layout, "aa", 0.2, note="docs only")  # the same code as slow, another commit
    # parse_rewards is allocation-heavy (json.loads): its count moved by 1.0 % between the base's worktree
    # and the working tree in CI, unchanged code, under either allocator (docs/baselines.md, "Which
    # allocator"); the A/A check sets its minimum effect above that, as the docs advise for such code.
    done = gymbench(project, "gate", "--base", "slow", "benches/", "-k", "parse", "--fail-on", "inconclusive",
                    "--instructions-min-effect", "0.03", "--results-dir", str(tmp_path / "r"), env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gate: PASS — 1 gated, 0 ungated (1 pass)" in done.stdout
    assert git(project, "worktree", "list").count("\n") == 0  # the base worktree is gone
