"""An experiment: is the window-to-window noise of llama.cpp's throughput on a 2-core machine the two
processes fighting over the cores? At each p, windows alternate between two placements of one
``llama-server -np SLOTS -t 1``: "shared" (server and client free to run on every core, as the truth
runs) and "pinned" (every server thread on the last core, the client on the first). Each placement's
spread (coefficient of variation between its windows) and mean are printed. Run from the repository
root: ``python benches/study/real_engine/pinning.py SLOTS 1,16,64 ROUNDS WINDOW_S``."""

# ruff: noqa: E501

import asyncio
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, "benches")
from test_real_engine import MAX_TOKENS, light_window

from gymbench.engine.build import cache_root, find_server
from gymbench.engine.model import cached_model
from gymbench.engine.server import start_llama_server

SLOTS = int(sys.argv[1])
PS = [int(x) for x in sys.argv[2].split(",")]
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 6
WINDOW = float(sys.argv[4]) if len(sys.argv) > 4 else 4.0
CORES = sorted(os.sched_getaffinity(0))

server = start_llama_server(
    find_server(), cached_model("tiny", cache_root()), slots=SLOTS, threads=1, context=512, max_tokens=MAX_TOKENS
)


def place(pinned: bool) -> None:
    """Every thread of the server on the last core and this process on the first, or both on all."""
    server_cores = {CORES[-1]} if pinned else set(CORES)
    for task in Path(f"/proc/{server.process.pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), server_cores)
    os.sched_setaffinity(0, {CORES[0]} if pinned else set(CORES))


async def main() -> None:
    readings: dict[tuple[int, str], list[float]] = {}
    for turn in range(ROUNDS):
        for p in PS:
            order = ("shared", "pinned") if turn % 2 == 0 else ("pinned", "shared")
            for placement in order:
                place(placement == "pinned")
                rate = (await light_window(server, p, WINDOW)).requests_per_s
                readings.setdefault((p, placement), []).append(rate)
                print(
                    f"round {turn} p={p:>3} {placement:>6} {rate:7.2f} requests/s load={os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    print(f"\n-np {SLOTS} -t 1, {ROUNDS} windows of {WINDOW:g} s per placement and p, cores {CORES}")
    for (p, placement), rates in sorted(readings.items()):
        mean = statistics.fmean(rates)
        cv = statistics.stdev(rates) / mean
        print(
            f"p={p:>3} {placement:>6}: mean {mean:7.2f} requests/s, spread (CV) {cv:5.1%}, range {min(rates):.1f}-{max(rates):.1f}"
        )


with server:
    asyncio.run(main())
