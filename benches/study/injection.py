"""Calibrate the study's injected slowdowns: loop iterations that cost 5, 10 and 20 % of each case.

In one process (one BLAS thread, as every job of the study), each case's call and a fixed-size
run of the injected loop (``aa_workloads.burn``) are timed alternately, many times, in CPU time
(a preempted call would otherwise look slower on this shared machine); the medians give the
loop's cost per iteration in units of the case's own time. The counts are then fixed for every
run of the study, so all processes do exactly the same extra work, and the slowdown each gate
sees can be checked against the nominal.

    python benches/study/injection.py --out benches/study/runs/injection.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from aa_workloads import WORKLOADS, burn  # noqa: E402

SLOWDOWNS = (0.05, 0.10, 0.20)
PROBE_ITERATIONS = 20_000


def _seconds(call: Callable[[], Any]) -> float:
    start = time.process_time()
    call()
    return time.process_time() - start


def calibrate_case(work: Callable[[], Any], budget_s: float) -> dict[str, Any]:
    """Alternate the case and the probe loop until ``budget_s`` is spent; medians of each."""
    work()  # warm up
    works, loops = [], []
    started = time.perf_counter()
    while time.perf_counter() - started < budget_s or len(works) < 50:
        works.append(_seconds(work))
        loops.append(_seconds(lambda: burn(PROBE_ITERATIONS)) / PROBE_ITERATIONS)
    work_s, per_iteration = statistics.median(works), statistics.median(loops)
    return {
        "work_s": work_s,
        "loop_s_per_iteration": per_iteration,
        "iterations": {f"{s:.2f}": max(1, round(s * work_s / per_iteration)) for s in SLOWDOWNS},
    }


def calibrate(budget_s: float) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        return {case: calibrate_case(lambda w=work: w(Path(tmp)), budget_s) for case, work in sorted(WORKLOADS.items())}


def slow_spec(injection: dict[str, dict[str, Any]], fraction: float, cases: list[str]) -> str:
    """The ``GYMBENCH_STUDY_SLOW`` value that slows ``cases`` by ``fraction``."""
    return ",".join(f"{case}:{injection[case]['iterations'][f'{fraction:.2f}']}" for case in cases)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of timing per case")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(calibrate(args.budget), indent=1))
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
