"""Real workloads for the gate study (``benches/study/gate_study.py``), not part of ``pytest benches/``.

Each case is a small piece of real CPU work of a different kind (sorting, JSON, regular
expressions, hashing, numpy, a results-record round trip, an event loop). The study reruns this
file many times unchanged (A/A) to measure how often a gate flags a change that is not there.

``GYMBENCH_STUDY_SLOW=<case>:<iterations>[,<case>:<iterations>...]`` injects a real slowdown: after
the work, the call runs a pure-Python loop of that many iterations (``injection.py`` calibrates
the count to cost 5, 10 or 20 % of the case's time). A loop, not a wait on the clock, so the extra
cost is real work that instruction counts see too, and it is the same work in every process.
``GYMBENCH_STUDY_JITTER=<n>`` keeps ``n`` small objects alive (see ``HEAP_JITTER``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gymbench import BenchmarkResult, Metric, Recorder, ResultsRecord, load_record, save_record
from gymbench.fingerprint import collect_fingerprint

RNG = random.Random(3)
NUMBERS = [RNG.random() for _ in range(20_000)]
DOC = {"rows": [{"id": i, "text": f"row {i}", "score": i * 0.5} for i in range(2_000)]}
DOC_TEXT = json.dumps(DOC)
TEXT = " ".join(f"word{i} {i * 7} answer: {i % 13}" for i in range(5_000))
PATTERN = re.compile(r"answer:\s*(\d+)")
BLOB = os.urandom(1 << 20)
MATRIX = np.random.default_rng(1).random((160, 160))
FINGERPRINT = collect_fingerprint()
HEAP_JITTER = [bytes(i % 97) for i in range(int(os.environ.get("GYMBENCH_STUDY_JITTER", "0")))]
"""Objects kept alive for the whole run, as many as the study says: the allocator's state then
differs between runs as it would after an unrelated code change, so A/A runs see that noise too."""


def injected(case: str) -> int:
    """Iterations of extra loop the study asks this case to run (0: none)."""
    for part in filter(None, os.environ.get("GYMBENCH_STUDY_SLOW", "").split(",")):
        name, _, iterations = part.partition(":")
        if name == case:
            return int(iterations)
    return 0


def burn(iterations: int) -> int:
    """Pure-Python work whose time and instructions grow with ``iterations``."""
    total = 0
    for i in range(iterations):
        total += i & 7
    return total


def slowed(case: str, work: Callable[[], Any]) -> Callable[[], Any]:
    """``work``, followed by the injected loop when the study asks for one."""
    iterations = injected(case)
    if not iterations:
        return work

    def run() -> Any:
        result = work()
        burn(iterations)
        return result

    return run


def _record_round_trip(tmp: Path) -> ResultsRecord:
    record = ResultsRecord(
        name="w",
        fingerprint=FINGERPRINT,
        benchmarks=[
            BenchmarkResult(f"b{i}", metrics={"time": Metric.from_samples(NUMBERS[:50], "s", "lower")})
            for i in range(20)
        ],
    )
    return load_record(save_record(record, tmp / "r.json"))


def _event_loop_ticks() -> None:
    async def many() -> None:
        for _ in range(2_000):
            await asyncio.sleep(0)

    asyncio.run(many())


WORKLOADS: dict[str, Callable[[Path], Any]] = {
    "sort": lambda tmp: sorted(NUMBERS),
    "json_dumps": lambda tmp: json.dumps(DOC),
    "json_loads": lambda tmp: json.loads(DOC_TEXT),
    "regex": lambda tmp: PATTERN.findall(TEXT),
    "sha256": lambda tmp: hashlib.sha256(BLOB).hexdigest(),
    "numpy_matmul": lambda tmp: MATRIX @ MATRIX,
    "numpy_sort": lambda tmp: np.sort(MATRIX, axis=None),
    "dict_build": lambda tmp: {str(i): i for i in range(20_000)},
    "string_join": lambda tmp: "".join(str(i) for i in range(20_000)),
    "record_round_trip": _record_round_trip,
    "event_loop": lambda tmp: _event_loop_ticks(),
    "comprehension": lambda tmp: [x * x for x in NUMBERS if x > 0.5],
}


@pytest.mark.parametrize("case", sorted(WORKLOADS))
def test_workload(gymbench: Recorder, tmp_path: Path, case: str) -> None:
    gymbench.measure(slowed(case, lambda: WORKLOADS[case](tmp_path)))
