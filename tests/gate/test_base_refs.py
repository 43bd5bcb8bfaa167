"""``gymbench gate --base`` on refs that name no commit, on the first commit, and on a dirty tree.

Each ref that cannot be gated against is one line saying why (empty, an option, a NUL byte, a
blob or a tree, past the history, a repository without commits), exit 2, and no worktree or
temporary directory left behind; the first commit is a base like any other; a dirty working tree
is measured as it is, and its label says so. A real git repository each time (the toy project).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gymbench.gate.ab.sides import DIRTY, Checkouts
from tests.gate.toy_project import commit, git, make_project


def gate(project: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``gymbench gate ARGS`` in ``project`` with a private TMPDIR, returned for the leftovers check."""
    tmp = project.parent / f"tmp-{len(list(project.parent.glob('tmp-*')))}"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    done = subprocess.run([sys.executable, "-m", "gymbench.cli", "gate", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    return done, tmp


def assert_nothing_left(project: Path, tmp: Path) -> None:
    assert sorted(p.name for p in tmp.iterdir()) == [], "a temporary directory was left"
    assert len(git(project, "worktree", "list").splitlines()) == 1, git(project, "worktree", "list")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The toy project: its first commit (tagged ``base``) and a second (``aa``, README only)."""
    root = make_project(tmp_path / "toy", "flat")
    commit(root, "flat", "aa", note="docs only")
    return root


def odd_refs(project: Path) -> dict[str, tuple[list[str], str]]:
    blob = git(project, "rev-parse", "HEAD:README.md")
    tree = git(project, "rev-parse", "HEAD^{tree}")
    (project.parent / "nul.yaml").write_text('base: "a\\0b"\n')
    return {
        "empty": (["--base", ""], "'': expected a git ref (a branch, a tag or a commit id), got an empty ref"),
        "an-option": (["--base=--all"], "'--all': expected a git ref (a branch, a tag or a commit id), got an option"),
        "nul-from-config": (["--config", str(project.parent / "nul.yaml")], "got a NUL byte"),
        "far-back": (["--base", "HEAD~99999"], "it goes back past the history of HEAD, 2 commits long."),
        "before-the-first": (["--base", "base^"], "past the history of base, 1 commit long: it is the first commit"),
        "a-blob": (["--base", blob], f"'{blob}' is not a commit of {project.resolve()}: it names a blob, not a commit"),
        "a-tree": (["--base", tree], "it names a tree, not a commit"),
        "unknown": (["--base", "no-such-branch"], "no branch, tag or commit has that name"),
    }


@pytest.mark.parametrize(
    "case", ["empty", "an-option", "nul-from-config", "far-back", "before-the-first", "a-blob", "a-tree", "unknown"]
)
def test_a_ref_that_names_no_commit_is_one_line_saying_why(project: Path, case: str) -> None:
    """Main said "'X' is not a commit (git rev-parse found nothing)" for all of these alike, and a NUL
    byte from --config was a ValueError traceback."""
    words, said = odd_refs(project)[case]
    done, tmp = gate(project, *words)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("gymbench: error: ") and said in line, line
    assert_nothing_left(project, tmp)


def test_a_repository_without_commits_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "unborn"
    empty.mkdir()
    git(empty, "init", "-q")
    done, tmp = gate(empty, "--base", "HEAD")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"gymbench: error: 'HEAD' is not a commit of {empty.resolve()}: the repository has no commits yet; commit first"
    ]
    assert_nothing_left(empty, tmp)


def test_the_first_commit_is_a_base_like_any_other(project: Path) -> None:
    """No parent is needed: the first commit checks out and its run starts (and here stops, since
    ``-k`` selects nothing, so the test stays quick), then its worktree goes."""
    first = git(project, "rev-list", "--max-parents=0", "HEAD")
    done, tmp = gate(project, "--base", first, "benches/", "-k", "no_such_benchmark")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"gymbench: counting base: {first[:10]} (benches/" in done.stderr
    assert f"gymbench: error: the base run (base: {first[:10]}) failed: pytest exit 5" in done.stderr
    assert_nothing_left(project, tmp)


def test_a_dirty_tree_is_measured_as_it_is_and_labelled_so(project: Path) -> None:
    """The candidate side is the working tree, uncommitted changes and all (what a developer means
    to gate); the base's worktree holds the commit alone. The label says the changes are in."""
    (project / "README.md").write_text("changed, not committed\n")
    with Checkouts(project) as checkouts:
        base, cand = checkouts.side("base", "HEAD"), checkouts.side("candidate", None)
        assert cand.label == f"candidate: working tree{DIRTY}" and cand.root == project.resolve()
        assert (base.root / "README.md").read_text() == "toyenv\ndocs only\n"
        made = base.root
    assert not made.exists() and len(git(project, "worktree", "list").splitlines()) == 1
    git(project, "checkout", "--", "README.md")
    with Checkouts(project) as checkouts:
        assert checkouts.side("candidate", None).label == "candidate: working tree"
