"""Issue 39's validation: ``gymbench tune`` with defaults, ten times, against a truth measured the
same day on one llama-server, some runs with a CPU hog beside them. Not a benchmark (it takes about
an hour per slot count); its table goes into docs/tuning.md.

Run from the repository root::

    python benches/study/real_engine/tune_validation.py SLOTS [RUNS] [TRUTH_WINDOW_S] [OUT.json]

The truth is the real-engine bench's (``benches/test_real_engine.py``: closed loops through the
``openai`` backend over 64 distinct prompts, each grid point in shuffled passes, its interval from
the spread between windows), measured before the tunes and again after them, pooled. Each tune
runs with the bench's requests and nothing else set (``tune_run`` with the defaults a user gets).
Every even-numbered run (2, 4, ...) has one busy-looping process beside it (``GYMBENCH_STUDY_HOGS=0``: none). Per run: the knee and its printed
interval, whether the truth's knee is inside it, the recommendation, the share of the true plateau
it delivers (the truth interpolated there), the recommendation against the truth's smallest
parallelism giving 95% of its plateau, and the tune's wall time. One JSON object at the end.

The truth's windows also read llama.cpp's ``requests_processing`` gauge (every 0.1 s inside each
window): the share of the slots busy at a parallelism is a lower bound on its share of what full
slots give (a step with fewer sequences is no slower), read within one window, so the machine's
drift between windows, which moves the truth's throughput points by 5-20%, cannot move it. Per run
the busy share at the recommendation (``gauge_delivers``) and the tune's own gauge readings.
"""

# ruff: noqa: E501

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, "benches")
from test_real_engine import MAX_TOKENS, PLUGINS, common, distinct_tasks, interpolated, rate_of, tasks_file

from gymbench.calibrate.loadgen import closed_loop, load_backend, load_settings, session_of, settle_server
from gymbench.calibrate.measure import IGNORE_EOS
from gymbench.engine.build import cache_root, find_server
from gymbench.engine.model import cached_model
from gymbench.engine.server import start_llama_server
from gymbench.engine_metrics import ScrapeFailed, fetch_metrics_text, sample_sums
from gymbench.settings import build_settings
from gymbench.testing import make_plugins
from gymbench.tune.command import tune_run
from gymbench.tune.config import TuneConfig
from gymbench.tune.curves import find_knee

SLOTS = int(sys.argv[1])
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
WINDOW_S = float(sys.argv[3]) if len(sys.argv) > 3 else 15.0
OUT = Path(sys.argv[4]) if len(sys.argv) > 4 else Path(f"/tmp/tune_validation_{SLOTS}.json")
HOGS = os.environ.get("GYMBENCH_STUDY_HOGS", "1") != "0"
"""0: no busy loop of its own (another study beside it is the load)."""
PASSES = 3
POINTS = {4: [1, 2, 3, 4, 5, 6, 8, 12, 16, 32], 64: [1, 4, 16, 32, 48, 64, 80, 96, 128, 192]}


def say(text: str) -> None:
    print(text, flush=True)


BUSY: dict[int, list[float]] = {}
"""Per parallelism, the mean of the busy-slot gauge inside each truth window."""


async def gauged_window(server, p: int, window_s: float):
    """The truth's window (``test_real_engine.light_window``) with the busy-slot gauge polled in it."""
    settings = load_settings(server.base_url, server.model, extra_body=dict(IGNORE_EOS), max_retries=0)
    polls: list[tuple[float, float]] = []

    async def poll() -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                text = await asyncio.to_thread(fetch_metrics_text, server.metrics_url)
                value = sample_sums(text).get("llamacpp:requests_processing")
                if value is not None:
                    polls.append((loop.time(), value))
            except ScrapeFailed:
                pass
            await asyncio.sleep(0.1)

    async with load_backend(settings) as backend:
        await settle_server(session_of(backend.client), server.metrics_url, PLUGINS.engine_metrics())
        poller = asyncio.create_task(poll())
        try:
            result = await closed_loop(backend, distinct_tasks(), p, window_s, 2.0)
        finally:
            poller.cancel()
    inside = [v for t, v in polls if result.started <= t <= result.started + result.window_s]
    return result, (statistics.mean(inside) if inside else float("nan"))


def measure_truth(server, points: list[int], seed: int) -> dict[int, list]:
    """``test_real_engine.measure_windows``'s shuffled passes, through :func:`gauged_window`."""
    windows: dict[int, list] = {p: [] for p in points}
    for turn in range(seed, seed + PASSES):
        order = list(points)
        random.Random(turn).shuffle(order)
        for p in order:
            result, busy = asyncio.run(gauged_window(server, p, WINDOW_S / PASSES))
            windows[p].append(result)
            BUSY.setdefault(p, []).append(busy)
    return windows


def gauged_probes(result) -> dict[int, float]:
    """The tune's own busy-slot readings, per parallelism (the mean where a level was probed twice)."""
    seen: dict[int, list[float]] = {}
    for probe in result.probes:
        if probe.server_running is not None:
            seen.setdefault(probe.parallelism, []).append(probe.server_running)
    return {p: round(statistics.mean(v), 3) for p, v in sorted(seen.items())}


def hog() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


points = POINTS.get(SLOTS) or sorted({1, max(1, SLOTS // 2), SLOTS, 2 * SLOTS, 4 * SLOTS})
server = start_llama_server(
    find_server(), cached_model("tiny", cache_root()), slots=SLOTS, threads=1, context=512, max_tokens=MAX_TOKENS
)
runs: list[dict] = []
with server, tempfile.TemporaryDirectory() as tmp:
    tasks = tasks_file(Path(tmp))
    say(f"-np {SLOTS}: truth before, {WINDOW_S:g} s per point in {PASSES} passes, load {os.getloadavg()[0]:.1f}")
    before = measure_truth(server, points, 0)
    for p in points:
        say(f"  p={p:>3}: " + ", ".join(f"{w.requests_per_s:.1f}" for w in before[p]) + f"; busy {BUSY[p]}")
    for run in range(RUNS):
        busy = hog() if run % 2 and HOGS else None
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        try:
            result = tune_run(build_settings(TuneConfig, [*common(server, tasks), "plot="]), make_plugins())
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
        wall = time.perf_counter() - started
        knee = result.knee
        runs.append({"run": run + 1, "hog": busy is not None, "load": [round(load_before, 1), round(os.getloadavg()[0], 1)],
                     "knee": knee.parallelism, "knee_low": knee.low, "knee_high": knee.high, "plateau": knee.plateau,
                     "recommended": result.recommended, "wall_s": wall, "stop": result.stop_reason,
                     "why": result.search.recommendation.why, "capacity": result.capacity,
                     "between": knee.between, "gauge": gauged_probes(result),
                     "drift": next((n for n in result.notes if "from one window to the next" in n), ""),
                     "levels": {p: [round(r.value, 2), round(r.half_width, 2)] for p, r in sorted(result.curve.items())}})  # fmt: skip
        say(f"run {run + 1}{' (hog)' if busy else ''}: knee {knee.parallelism:.1f} [{knee.low:.1f}, {knee.high:.1f}], "
            f"recommended {result.recommended}, {wall:.0f} s, load {load_before:.1f}-{os.getloadavg()[0]:.1f}; levels "
            + ", ".join(f"{p}: {r.value:.1f}" for p, r in sorted(result.curve.items()))
            + (f"\n  {result.search.recommendation.why}" if result.search.recommendation.why else "")
            + (f"\n  {runs[-1]['drift']}" if runs[-1]["drift"] else ""))  # fmt: skip
    say(f"truth after, load {os.getloadavg()[0]:.1f}")
    after = measure_truth(server, points, 100)
    for p in points:
        say(f"  p={p:>3}: " + ", ".join(f"{w.requests_per_s:.1f}" for w in after[p]) + f"; busy {BUSY[p]}")

rates = {p: rate_of(before[p] + after[p]) for p in points}
found = find_knee(rates)
curve = {p: r.value for p, r in rates.items()}
plateau = found.plateau
smallest_95 = next(p for p in range(1, max(points) + 1) if interpolated(curve, p) >= 0.95 * plateau)
truth = {"knee": found.parallelism, "low": found.low, "high": found.high, "plateau": plateau, "smallest_95": smallest_95,
         "curve": {p: [round(r.value, 2), round(r.half_width, 2)] for p, r in rates.items()},
         "before": {p: [round(w.requests_per_s, 2) for w in before[p]] for p in points},
         "after": {p: [round(w.requests_per_s, 2) for w in after[p]] for p in points},
         "busy": {p: [round(b, 3) for b in BUSY[p]] for p in points}}  # fmt: skip
busy_share = {p: statistics.mean(BUSY[p]) / SLOTS for p in points}
gauge_knee = next((p for p in range(1, max(points) + 1) if interpolated(busy_share, p) >= 0.95), None)
truth["busy_share"] = busy_share
truth["gauge_knee"] = gauge_knee
say("truth's busy share of the slots: " + ", ".join(f"{p}: {v:.1%}" for p, v in busy_share.items())
    + f"; smallest parallelism with 95% busy (a bound on the knee no drift moves): {gauge_knee}")  # fmt: skip
say(f"truth (pooled): knee {found.parallelism:.1f} [{found.low:.1f}, {found.high:.1f}], plateau {plateau:.2f}, "
    f"smallest giving 95% of it {smallest_95}")  # fmt: skip
say(
    "| run | hog | load | knee [printed interval] | truth's knee inside | recommended | delivers | slots busy there | ≤ 1.5× smallest-95 | wall |"
)
say("|---|---|---|---|---|---|---|---|---|---|")
for r in runs:
    r["inside"] = r["knee_low"] <= found.parallelism <= r["knee_high"]
    r["delivers"] = interpolated(curve, r["recommended"]) / plateau
    r["within_1_5"] = r["recommended"] <= 1.5 * smallest_95
    r["gauge_delivers"] = interpolated(busy_share, r["recommended"])
    say(f"| {r['run']} | {'yes' if r['hog'] else ''} | {r['load'][0]}-{r['load'][1]} | {r['knee']:.1f} [{r['knee_low']:.1f}, "
        f"{r['knee_high']:.1f}] | {'yes' if r['inside'] else 'no'} | {r['recommended']} | {r['delivers']:.1%} | "
        f"{r['gauge_delivers']:.1%} | "
        f"{'yes' if r['within_1_5'] else 'no'} | {r['wall_s']:.0f} s |")  # fmt: skip
summary = {"inside": sum(r["inside"] for r in runs), "delivers_95": sum(r["delivers"] >= 0.95 for r in runs),
           "within_1_5": sum(r["within_1_5"] for r in runs),
           "gauge_delivers_95": sum(r["gauge_delivers"] >= 0.95 for r in runs), "under_5_min": sum(r["wall_s"] <= 300 for r in runs),
           "runs": len(runs)}  # fmt: skip
say(json.dumps(summary))
OUT.write_text(json.dumps({"slots": SLOTS, "truth": truth, "runs": runs, "summary": summary}, indent=1, default=str))
assert math.isfinite(plateau)
