"""Suite-wide guards."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "results"


@pytest.fixture(scope="session", autouse=True)
def repository_results_stay_untouched() -> Iterator[None]:
    """Tests write results records into temporary directories, never into the repository's results/."""
    before = set(RESULTS.rglob("*"))
    yield
    added = sorted(str(path.relative_to(RESULTS)) for path in set(RESULTS.rglob("*")) - before)
    assert not added, f"a test wrote into the repository's results/: {added[:5]}"


@pytest.fixture(scope="session", autouse=True)
def children_are_not_xdist_workers() -> Iterator[None]:
    """The README runs this suite under pytest-xdist (``-n 2``), which marks each worker's environment
    (``PYTEST_XDIST_WORKER``...). A pytest the tests start inherits it, and pytest-benchmark there then
    disables itself ("xdist plugin is active") and writes no record: the child must run as a user's."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [name for name in os.environ if name.startswith("PYTEST_XDIST_")]:
            patch.delenv(name)
        yield
