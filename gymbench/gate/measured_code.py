"""Which code a run measured: the checkout's own packages, where they were imported from, and a
digest of both, recorded in every pytest run's fingerprint (``fingerprint["code"]``).

A base run made in a worktree of the base commit can import another checkout's package: an
editable install (``pip install -e .``, most projects' README) points at the pull request's
tree, and a callgrind child given ``PYTHONPATH="$PWD"`` misses a ``src/`` layout. The run then
measures the pull request twice and every regression passes. The fingerprint's commit cannot
tell (it is the worktree's), so the record says what was imported, and
:func:`refuse_same_code` refuses to compare two records that measured identical code while
their own checkouts differ.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gymbench.errors import GymbenchError

NOT_PACKAGES = frozenset({"tests", "test", "benches", "benchmarks", "docs", "examples", "scripts", "build", "dist"})
"""Directories of a checkout that hold ``__init__.py`` without being the code under test."""


def project_packages(root: Path) -> dict[str, Path]:
    """The checkout's importable packages: ``root/<name>/`` (flat layout) and ``root/src/<name>/``."""
    found: dict[str, Path] = {}
    for parent in (root / "src", root):
        if not parent.is_dir():
            continue
        for init in sorted(parent.glob("*/__init__.py")):
            name = init.parent.name
            if name.isidentifier() and name not in NOT_PACKAGES and name not in found:
                found[name] = init.parent.resolve()
    return found


def measured_code(root: Path, modules: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Where this process imported the checkout's packages from, and digests of both sides.

    ``digest`` hashes the imported packages' sources, ``source_digest`` the checkout's: equal when
    the run measured its own checkout.
    """
    modules = sys.modules if modules is None else modules
    packages = project_packages(root)
    imported: dict[str, str] = {}
    for name in packages:
        file = getattr(modules.get(name), "__file__", None)
        if file:
            imported[name] = str(Path(file).resolve().parent)
    return {
        "root": str(root.resolve()),
        "imported": imported,
        "digest": _digest(Path(p) for p in imported.values()),
        "source_digest": _digest(packages[name] for name in imported),
    }


def _digest(directories: Iterable[Path]) -> str:
    """sha256 over every ``.py`` file's path (relative to its package) and content."""
    sha = hashlib.sha256()
    for directory in directories:
        for path in sorted(directory.rglob("*.py")):
            sha.update(f"{directory.name}/{path.relative_to(directory)}\0".encode())
            sha.update(path.read_bytes())
    return sha.hexdigest()[:16]


def foreign_imports(code: Mapping[str, Any], root: Path) -> dict[str, str]:
    """Packages a run imported from outside its own checkout ``root``: name → directory."""
    inside = root.resolve()
    return {name: where for name, where in code.get("imported", {}).items() if not Path(where).is_relative_to(inside)}


def refuse_same_code(baseline: Sequence[Any], candidate: Sequence[Any]) -> None:
    """One line and no comparison when both sides measured the same code though their checkouts
    (and commits) differ: the baseline imported the candidate's package, or the reverse."""
    base = _code_and_commit(baseline)
    cand = _code_and_commit(candidate)
    if base is None or cand is None:
        return
    (base_code, base_commit), (cand_code, cand_commit) = base, cand
    same_code = base_code.get("digest") == cand_code.get("digest") and base_code.get("imported")
    if base_commit != cand_commit and same_code and base_code.get("source_digest") != cand_code.get("source_digest"):
        where = ", ".join(f"{n} from {p}" for n, p in sorted(base_code["imported"].items()))
        raise GymbenchError(
            f"refusing to compare: the baseline (commit {str(base_commit)[:10]}) and the candidate "
            f"(commit {str(cand_commit)[:10]}) measured identical code ({where}) though their checkouts "
            "differ, so one imported the other's package (an editable install, or a PYTHONPATH without "
            "src/); run `gymbench gate --base REF`, which imports each commit's own code"
        )


def _code_and_commit(records: Sequence[Any]) -> tuple[Mapping[str, Any], object] | None:
    for record in reversed(records):
        code = record.fingerprint.get("code")
        if code:
            return code, record.fingerprint.get("commit", {}).get("id")
    return None
