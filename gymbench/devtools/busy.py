"""Run pytest with CPU hogs beside it: proof that the suite passes on a busy machine.

    python -m gymbench.devtools.busy [--hogs N] [--report FILE] -- PYTEST_ARGS...

Starts ``N`` busy Python processes (default: one per CPU, so the load doubles), runs
``python -m pytest PYTEST_ARGS`` beside them, stops them whatever happens, and prints the wall
time, the load average and pytest's exit status (which it returns). Tests assert behaviour that
holds at any load (simulated clocks, counts, windows that wait for work), so the outcome must not
depend on ``N``; CI runs a subset this way. ``--report`` writes the same figures as JSON.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gymbench.jsonio import write_json_atomic

HOG = "while True:\n    pass\n"


def start_hogs(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` processes spinning on one core each, at normal priority (as other users' work is)."""
    return [subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL) for _ in range(count)]


def stop_hogs(hogs: Sequence[subprocess.Popen[bytes]]) -> None:
    for hog in hogs:
        hog.kill()
    for hog in hogs:
        hog.wait()


def run_busy(pytest_args: Sequence[str], hogs: int) -> dict[str, float | int | str]:
    """pytest's exit status and wall time with ``hogs`` busy processes beside it."""
    signal.signal(signal.SIGTERM, _interrupt)  # a CI timeout's SIGTERM still stops the hogs
    running = start_hogs(hogs)
    started = time.monotonic()
    try:
        code = subprocess.run([sys.executable, "-m", "pytest", *pytest_args], check=False).returncode
    finally:
        wall = time.monotonic() - started
        stop_hogs(running)
    return {"exit_status": code, "wall_s": round(wall, 1), "hogs": hogs, "load_1min": os.getloadavg()[0],
            "pytest_args": " ".join(pytest_args)}  # fmt: skip


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gymbench.devtools.busy", description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="busy processes (default: CPUs)")
    parser.add_argument("--report", type=Path, help="write the figures as JSON here")
    parser.add_argument("pytest_args", nargs="*", help="after --: what pytest runs (default: tests/)")
    args = parser.parse_args(argv)
    if args.hogs < 0:
        parser.error("--hogs must be 0 or more")
    figures = run_busy(args.pytest_args or ["tests/"], args.hogs)
    print(
        f"busy mode: {figures['hogs']} CPU hogs beside pytest {figures['pytest_args']}: exit status "
        f"{figures['exit_status']}, wall {figures['wall_s']} s, load average {figures['load_1min']:.1f} at the end"
    )
    if args.report is not None:
        write_json_atomic(args.report, figures, indent=2)
    return int(figures["exit_status"])


if __name__ == "__main__":
    sys.exit(main())
