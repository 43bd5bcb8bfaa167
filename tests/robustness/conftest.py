"""The full-disk fixture every ENOSPC test here shares (:mod:`.small_fs`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .small_fs import SmallFs, small_fs


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallFs]:
    """A real 512 KiB tmpfs in the test's scratch folder (skipped with the reason where it cannot be mounted)."""
    with small_fs(tmp_path / "small") as fs:
        yield fs
