"""A tiny user project, as a team adopting the gate would have one: an RL environment package
(flat or ``src/`` layout), its benchmarks (synchronous, asyncio, a numpy matmul), a git history.

Used by the tests of ``gymbench gate --base`` and by ``benches/study/gate_recipe/figures.py``.
``slowdown`` adds that fraction of ``parse_rewards``'s work (one more pass over a share of the
input), so a commit can be slower by a calibrated 5/10/20 %.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

PACKAGE = '''"""toyenv: reward parsing and aggregation of an RL environment."""

import json

SLOWDOWN = {slowdown!r}


def parse_rewards(lines):
    total = 0.0
    for line in lines:
        total += float(json.loads(line)["reward"])
    extra = int(len(lines) * SLOWDOWN)
    for line in lines[:extra]:
        total += 0.0 * float(json.loads(line)["reward"])
    return total


def tokenize(text):
    words = []
    for word in text.split():
        words.append(word.lower().strip(".,"))
    return words


async def score_async(lines):
    return parse_rewards(lines)
'''
BENCH = """import numpy as np
import pytest

import toyenv

LINES = [f'{{"reward": {i % 5}, "id": {i}}}' for i in range(400)]
TEXT = "The quick brown fox, jumps over the lazy dog. " * 40


def test_parse(gymbench):
    gymbench.measure(toyenv.parse_rewards, LINES)


def test_tokenize(gymbench):
    gymbench.measure(toyenv.tokenize, TEXT)


def test_matmul(gymbench):
    a = np.ones((64, 64))
    gymbench.measure(np.dot, a, a)


@pytest.mark.asyncio
async def test_score_async(gymbench):
    await gymbench.ameasure(toyenv.score_async, LINES)
"""
PYPROJECT = """[project]
name = "toyenv"
version = "0.1"

[tool.pytest.ini_options]
asyncio_default_fixture_loop_scope = "function"
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def package_dir(root: Path, layout: str) -> Path:
    """Where the package lives: ``root/toyenv`` (flat) or ``root/src/toyenv`` (src)."""
    return root / "src" / "toyenv" if layout == "src" else root / "toyenv"


def import_root(root: Path, layout: str) -> Path:
    """What an editable install (or the README's PYTHONPATH) puts on sys.path."""
    return root / "src" if layout == "src" else root


def commit(root: Path, layout: str, tag: str, slowdown: float = 0.0, note: str | None = None) -> None:
    """Write the package with ``slowdown``; ``note`` changes only the README (an A/A commit)."""
    files = {
        package_dir(root, layout) / "__init__.py": PACKAGE.format(slowdown=slowdown),
        root / "benches" / "test_toy.py": BENCH,
        root / "pyproject.toml": PYPROJECT,
        root / "README.md": f"toyenv\n{note or ''}\n",
    }
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-qm", tag)
    git(root, "tag", "-f", tag)


def make_project(root: Path, layout: str) -> Path:
    """A git-initialised project with one commit, tagged ``base``."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q")
    git(root, "config", "user.email", "toy@example.com")
    git(root, "config", "user.name", "toy")
    commit(root, layout, "base")
    return root


def study_project(root: Path, layout: str, slowdowns: dict[str, float]) -> Path:
    """:func:`make_project`, then a commit per slowdown off ``base`` (tagged by its key) and an A/A
    commit (``aa``, README only); ``base`` checked out. The gate studies' project."""
    repo = make_project(root, layout)
    for tag, fraction in slowdowns.items():
        git(repo, "checkout", "-q", "base")
        commit(repo, layout, tag, fraction)
    git(repo, "checkout", "-q", "base")
    commit(repo, layout, "aa", 0.0, note="docs only")
    git(repo, "checkout", "-q", "base")
    return repo
