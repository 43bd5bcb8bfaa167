"""A real small file system for tests of a full disk: a tmpfs of a few hundred KiB, mounted in the
test's scratch folder (root in a container may mount one; elsewhere the tests are skipped with the
reason). Nothing is faked: every write goes through the kernel and fails with ENOSPC there.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

PAGE = 4096


class SmallFs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.filler = root / "filler"

    def free(self) -> int:
        stats = os.statvfs(self.root)
        return stats.f_bavail * stats.f_frsize

    def fill(self, leave: int = 0) -> None:
        """Take all space but ``leave`` bytes (rounded down to whole pages)."""
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()
        size = max(self.free() - leave, 0) // PAGE * PAGE
        with open(self.filler, "wb") as handle:
            handle.write(b"\0" * size)  # written, not sparse: tmpfs counts only written pages

    def empty(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()

    def left_behind(self) -> list[str]:
        """Hidden temporary files anywhere on it: a full disk must never leave one."""
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob(".*") if p.name.endswith(".tmp"))


@contextlib.contextmanager
def small_fs(where: Path, size: str = "512k") -> Iterator[SmallFs]:
    where.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
        )
    except FileNotFoundError:
        pytest.skip("no mount command here: a full disk needs a small tmpfs")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({mounted.stderr.strip() or 'mount failed'}); needs root")
    try:
        yield SmallFs(where)
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
