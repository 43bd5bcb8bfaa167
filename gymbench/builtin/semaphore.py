"""The ``semaphore`` concurrency strategy: NeMo Gym's ``num_samples_in_parallel``.

At most ``limit`` rollouts run at once; with no limit every task may start at once, which is
NeMo Gym's default and can overwhelm servers, exceed rate limits or run out of memory.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from typing import Any

from gymbench.types import RequestOutcome, ignores_outcome

UNBOUNDED_WARNING = (
    "num_samples_in_parallel is not set: every task may run at once, which can overwhelm the "
    "model server, exceed API rate limits or run out of memory. Set +num_samples_in_parallel=N."
)


class _NoLimit:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc_info: object) -> None:
        return None


_NO_LIMIT = _NoLimit()


class SemaphoreStrategy:
    def __init__(self, limit: int | None) -> None:
        """``limit``: at least 1, or ``None``; the strategy's settings checked it (``Parallelism``)."""
        self._limit = limit
        self._semaphore = asyncio.Semaphore(limit) if limit is not None else None

    @property
    def limit(self) -> int | None:
        return self._limit

    def slot(self) -> AbstractAsyncContextManager[Any]:
        """The semaphore itself (no wrapper per rollout: this is on the hot path)."""
        return self._semaphore if self._semaphore is not None else _NO_LIMIT

    @ignores_outcome
    def observe(self, outcome: RequestOutcome) -> None:
        """A fixed limit ignores feedback (marked so: the engine builds no outcome for it)."""
