"""Suite-wide guards."""

from __future__ import annotations

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
