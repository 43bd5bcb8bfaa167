"""Only a benchmark that really runs on a BLAS pool gets "threads forced to 1" (gymbench/threads.py).

A numpy matmul large enough for OpenBLAS to split (256 x 256: below 64^3 multiply-adds it stays
on the caller) against a pure-Python loop, measured both ways the gates measure: the timed
session (threads as the user runs them) and an A/B worker, started with one thread forced, whose
probe lifts the limit. Each assertion fails if every row, or no row, got the note.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gymbench.gate.callgrind import DETERMINISTIC_ENV
from gymbench.measure import MeasureSettings, Recorder
from gymbench.threads import THREADS_EXTRA

np = pytest.importorskip("numpy")
threadpoolctl = pytest.importorskip("threadpoolctl")
pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a BLAS pool needs two CPUs to split work")
SETTINGS = MeasureSettings(warmup_rounds=1, min_rounds=3, max_rounds=20, min_time_s=0.2, max_time_s=1.0)


def pure(n: int = 3000) -> int:
    return sum(i % 7 for i in range(n))


def test_the_timed_session_marks_only_the_benchmark_that_ran_on_a_pool() -> None:
    matrix = np.ones((256, 256))
    with threadpoolctl.threadpool_limits(limits=2):
        loop, matmul = Recorder(SETTINGS), Recorder(SETTINGS)
        loop.measure(pure)  # first: a pool that has worked spins for a while (settle() waits for it)
        matmul.measure(np.dot, matrix, matrix)
        after = Recorder(SETTINGS)
        after.measure(pure)  # right after the matmul: its pool's spinning is not this benchmark's
    assert THREADS_EXTRA not in loop.result("loop").extra
    assert matmul.result("matmul").extra[THREADS_EXTRA] >= 1
    assert THREADS_EXTRA not in after.result("after").extra


WORKER = """
import json, sys
import numpy as np
from gymbench.measure import MeasureSettings, Recorder


class Pacer:  # what an A/B worker's pacer does, minus the socket: two rounds, then done
    def __init__(self):
        self.rounds, self.helpers = 0, None

    def next_round(self, metric, iterations):
        self.rounds += 1
        return iterations if self.rounds <= 2 else None

    def round_done(self, wall_s, cpu_s):
        pass

    def threads_seen(self, helpers):
        self.helpers = helpers


def pure():
    return sum(i % 7 for i in range(3000))


seen = {}
matrix = np.ones((256, 256))
for name, fn, args in (("pure", pure, ()), ("matmul", np.dot, (matrix, matrix)), ("pure_after", pure, ())):
    pacer = Pacer()
    Recorder(MeasureSettings(warmup_rounds=1), pacer=pacer).measure(fn, *args)
    seen[name] = pacer.helpers
json.dump(seen, sys.stdout)
"""


def test_an_ab_worker_with_one_thread_forced_probes_each_benchmark() -> None:
    """The worker's environment forces one thread, as the A/B runner starts it; the probe lifts it."""
    done = subprocess.run(
        [sys.executable, "-c", WORKER], env={**os.environ, **DETERMINISTIC_ENV}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["pure"] == 0 and seen["pure_after"] == 0
    assert seen["matmul"] >= 1
