"""Start llama.cpp's ``llama-server`` with a chosen slot count, for calibration tests and benches.

The ``gymbench_llama_server`` fixture serves one configuration (4 slots); a calibration is checked
on two (slot-bound and compute-bound), so this starts its own through the same code
(:mod:`gymbench.engine`: the cached build, or ``GYMBENCH_LLAMA_SERVER``; the tiny model). Skips
with the reason where no engine can be had. One compute thread (``-t 1``): the machines these run
on are shared.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from gymbench.engine.build import cache_root, find_server
from gymbench.engine.model import cached_model
from gymbench.engine.server import start_llama_server
from gymbench.errors import GymbenchError


@contextmanager
def running_llama_server(slots: int, context: int = 8192, threads: int = 1) -> Iterator[str]:
    """The server's ``/v1`` URL while the block runs (``context`` tokens in all, shared by the slots)."""
    try:
        server = start_llama_server(find_server(), cached_model("tiny", cache_root()), slots=slots,
                                    threads=threads, context=max(1, context // slots))  # fmt: skip
    except GymbenchError as exc:
        pytest.skip(f"no real engine: {exc}")
    with server:
        yield server.base_url
