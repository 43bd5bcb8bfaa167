"""The two sides of an A/B run: a checkout per commit, run with this environment's interpreter.

A side is a git worktree of the commit (or the working tree itself, uncommitted changes and
all). Nothing is reinstalled: the worker runs this environment's Python with ``PYTHONPATH``
pointing at the side's checkout, which comes before site-packages and before an editable
install's finder, so the commit's own modules are imported, and the pytest plugin and console
script entry points (``gymbench.pytest.plugin``, ``gymbench.cli:main``) resolve their modules the
same way. That is correct as long as both commits need what is installed here: when their
``pyproject.toml`` dependencies or entry points differ, the run says so, since it cannot tell
whether the installed ones fit both; compiled extensions are not rebuilt.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from gymbench.console import printable
from gymbench.errors import GymbenchError
from gymbench.types import JSONObject

WORKING_TREE = "working tree"
DIRTY = " (uncommitted changes included)"
"""Said after the working tree's label when tracked files differ from its commit: they are measured."""


@dataclass(frozen=True)
class Side:
    """Where one side's worker runs, and what it is called in reports."""

    label: str
    root: Path
    """The checkout."""
    cwd: Path
    """Where pytest runs: the checkout's copy of the directory the comparison was started in."""
    env: Mapping[str, str] = field(default_factory=dict)
    commit: str | None = None

    def environment(self) -> dict[str, str]:
        return {**os.environ, **self.env}


def git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in an argument (a ref from --config)
        raise GymbenchError(f"cannot run git ({exc}); the A/B comparison needs git") from None
    except subprocess.TimeoutExpired:
        raise GymbenchError(f"git {args[0]} did not finish in 120 s in {repo}; is the repository locked?") from None
    if done.returncode != 0:
        raise GymbenchError(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def repo_root(start: Path) -> Path:
    try:
        return Path(git(start, "rev-parse", "--show-toplevel")).resolve()
    except GymbenchError:
        raise GymbenchError(
            f"{start} is not inside a git repository: comparing commits (compare --ab, gate --base) checks them out"
        ) from None


def code_path(root: Path) -> dict[str, str]:
    """``PYTHONPATH`` for a checkout: its root, and ``src/`` for a src layout."""
    entries = [str(root)] + ([str(root / "src")] if (root / "src").is_dir() else [])
    inherited = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join(entries + ([inherited] if inherited else []))}


class Checkouts:
    """Worktrees for the commits of one A/B run, removed afterwards (a context manager)."""

    def __init__(self, start: Path) -> None:
        self.repo = repo_root(start)
        self.relative = start.resolve().relative_to(self.repo)
        self.tmp = Path(tempfile.mkdtemp(prefix="gymbench-ab-"))
        self.made: dict[str, Path] = {}
        self._previous: Any = None

    def side(self, label: str, ref: str | None, env: Mapping[str, str] | None = None) -> Side:
        """``ref`` checked out (once per commit), or the working tree itself when ``ref`` is ``None``."""
        if ref is None:
            root, commit, name = self.repo, None, WORKING_TREE + (DIRTY if self.dirty() else "")
        else:
            commit = self.resolve(ref)
            root = self.made.get(commit) or self._add_worktree(commit)
            name = f"{ref} ({commit[:10]})" if not commit.startswith(ref) else commit[:10]
        return Side(f"{label}: {name}", root, root / self.relative, {**code_path(root), **(env or {})}, commit)

    def dirty(self) -> bool:
        """Tracked files changed and not committed: the working tree side measures them as they are."""
        try:
            return bool(git(self.repo, "status", "--porcelain", "--untracked-files=no"))
        except GymbenchError:
            return False

    def resolve(self, ref: str) -> str:
        """``ref``'s commit id, or one line saying why it names none (empty, a blob, past the history)."""
        shown = ref if len(ref) <= 100 else ref[:97] + "..."  # shown with !r: control characters escaped
        if not ref.strip() or ref.startswith("-") or "\x00" in ref:
            what = "an empty ref" if not ref.strip() else ("an option" if ref.startswith("-") else "a NUL byte")
            raise GymbenchError(
                f"{shown!r}: expected a git ref (a branch, a tag or a commit id), got {what}; "
                "name the commit to compare against, e.g. origin/main"
            )
        try:
            return git(self.repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        except GymbenchError:
            raise GymbenchError(f"{shown!r} is not a commit of {self.repo}: {self._why_not(ref)}") from None

    def _why_not(self, ref: str) -> str:
        """Why ``ref`` names no commit, in words a CI log reader can act on."""
        kind = _quiet_git(self.repo, "cat-file", "-t", ref)
        if kind and kind != "commit":
            return f"it names a {kind}, not a commit; give a commit (a branch, a tag or a commit id)"
        if _quiet_git(self.repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}") is None:
            return "the repository has no commits yet; commit first"
        back = re.fullmatch(r"(.+?)((?:[~^][0-9]*)+)", ref)
        anchor = back.group(1) if back else None
        if anchor and _quiet_git(self.repo, "rev-parse", "--verify", "--quiet", f"{anchor}^{{commit}}"):
            count = _quiet_git(self.repo, "rev-list", "--count", "--first-parent", anchor) or "?"
            first = ": it is the first commit, with no parent" if count == "1" else ""
            commits = "1 commit" if count == "1" else f"{count} commits"
            shallow = _quiet_git(self.repo, "rev-parse", "--is-shallow-repository") == "true"
            fetch = (" This clone is shallow: fetch the history (git fetch --unshallow; actions/checkout with "
                     "fetch-depth: 0).") if shallow else ""  # fmt: skip
            return f"it goes back past the history of {printable(anchor)}, {commits} long{first}.{fetch}"
        return "no branch, tag or commit has that name (git rev-parse found nothing); fetch it, or check its spelling"

    def _add_worktree(self, commit: str) -> Path:
        path = self.tmp / commit[:12]
        git(self.repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
        self.made[commit] = path
        return path

    def environment_warnings(self, base: Side, cand: Side) -> list[str]:
        """Dependencies or entry points that differ: the shared environment may not fit both."""
        declared = [_declared(side.root / "pyproject.toml") for side in (base, cand)]
        if declared[0] == declared[1]:
            return []
        return [
            "pyproject.toml's dependencies or entry points differ between the two commits; the A/B run "
            "uses this environment for both (PYTHONPATH points at each checkout), so install what both need"
        ]

    def __enter__(self) -> Checkouts:
        """A terminated run (a cancelled CI job sends SIGTERM) still removes its worktrees."""
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, _exit_on_terminate)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
        for path in self.made.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=self.repo, capture_output=True)
        subprocess.run(["git", "worktree", "prune"], cwd=self.repo, capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


def _quiet_git(repo: Path, *args: str) -> str | None:
    """``git args``'s output, or ``None`` when it fails (a question whose answer may be no)."""
    try:
        return git(repo, *args)
    except GymbenchError:
        return None


def _exit_on_terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _declared(pyproject: Path) -> JSONObject:
    import tomllib

    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    keys = ("dependencies", "optional-dependencies", "scripts", "entry-points")
    return {key: project.get(key) for key in keys}
