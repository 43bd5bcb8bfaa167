"""gymbench's latency figures against a server whose true timings are known (issue 27).

Starts ``tests/known_timing_server.py`` in its own process on 127.0.0.1 and measures:

1. TTFT, ITL and e2e percentiles (p50, p90, p99) at C=8 and C=32 over ``--runs`` seeded runs of
   ``--requests`` streamed requests each, against the server's own per-request measurements of
   the same run (the truth), with how often gymbench's 95% interval covered it, the median
   offset, and gymbench's own client-delay figure beside it;
2. open-loop ``constant`` arrivals at 10, 50 and 200 req/s: achieved ÷ target;
3. ``gymbench collect +num_workers=1`` against ``=2`` on the same machine: rollouts/s each.

Writes ``benches/study/runs/latency_truth.json`` (not committed: docs/reports.md has the figures) and prints a
markdown summary. Run from the repository
root: ``python benches/study/latency_truth.py --runs 20``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.builtin.openai_backend import OpenAIBackend
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.collect.collection import make_strategy
from gymbench.plugins import Plugins, get_plugin_manager
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.types import ConcurrencyStrategy

ROOT = Path(__file__).resolve().parents[2]
METRICS = ("ttft", "itl", "e2e")
QUANTILES = (50, 90, 99)


def start_server(*args: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.known_timing_server", "--port", "0", *args],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("PORT "):
        process.kill()
        raise SystemExit(f"the known-timing server did not start: {line!r}")
    return process, f"http://127.0.0.1:{line.split()[1]}"


def call(url: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def write_tasks(path: Path, count: int) -> Path:
    rows = ({"responses_create_params": {"input": f"{i} + 0?"}, "expected_answer": "4"} for i in range(count))
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


async def collect(base: str, tasks: Path, out: Path, strategy: ConcurrencyStrategy) -> dict[str, Any]:
    backend = OpenAIBackend(OpenAISettings(base_url=base + "/v1", model="known", api="chat", stream=True))
    settings = CollectSettings(tasks, out, overwrite=True)
    stats = await Collector(settings, backend, ExactMatchVerifier(), strategy).run()
    return dict(stats.summary())


def closed_loop(base: str, work: Path, concurrency: int, runs: int, requests: int) -> dict[str, Any]:
    tasks = write_tasks(work / "tasks.jsonl", requests)
    per_run = []
    for seed in range(runs):
        call(base + "/reset", {"seed": seed})
        summary = asyncio.run(collect(base, tasks, work / "out.jsonl", SemaphoreStrategy(concurrency)))
        measured = call(base + "/truth")["measured"]
        found: dict[str, Any] = {"client_delay": summary.get("client_delay")}
        for metric in METRICS:
            truth = np.array([m[metric] for m in measured])
            table = summary["latency_percentiles_s"][metric]
            for q in QUANTILES:
                cell = table[f"p{q}"]
                true = float(np.quantile(truth, q / 100))
                covered = None if cell["low"] is None else bool(cell["low"] <= true <= cell["high"])
                found[f"{metric}_p{q}"] = {"client": cell["value"], "truth": true, "covered": covered}
        per_run.append(found)
    return {"concurrency": concurrency, "runs": runs, "requests": requests, "per_run": per_run}


def closed_loop_table(result: dict[str, Any]) -> list[str]:
    lines = [f"C={result['concurrency']}, {result['runs']} runs x {result['requests']} requests:",
             "| figure | truth (server) ms | gymbench ms | median offset ms | 95% interval covered |",
             "|---|---:|---:|---:|---:|"]  # fmt: skip
    for metric in METRICS:
        for q in QUANTILES:
            cells = [run[f"{metric}_p{q}"] for run in result["per_run"]]
            truth = np.median([c["truth"] for c in cells]) * 1e3
            client = np.median([c["client"] for c in cells]) * 1e3
            offset = np.median([c["client"] - c["truth"] for c in cells]) * 1e3
            judged = [c["covered"] for c in cells if c["covered"] is not None]
            cover = f"{sum(judged)}/{len(judged)}" if judged else "-"
            lines.append(f"| {metric} p{q} | {truth:.2f} | {client:.2f} | {offset:+.2f} | {cover} |")
    delays = [run["client_delay"] for run in result["per_run"] if run["client_delay"]]
    if delays:
        p50 = np.median([d["p50_s"] for d in delays]) * 1e3
        p99 = np.median([d["p99_s"] for d in delays]) * 1e3
        bound = sum(d["client_bound"] for d in delays)
        cores = np.median([d["cpu_cores"] or 0.0 for d in delays])
        queue = [d["run_queue_share"] for d in delays if d["run_queue_share"] is not None]
        waited = f", waited for a CPU {np.median(queue):.0%} of the run" if queue else ""
        lines.append(f"client delay per request (gymbench's own figure, median of runs): p50 {p50:.2f} ms, "
                     f"p99 {p99:.2f} ms; client-bound in {bound}/{len(delays)} runs; client CPU {cores:.2f} "
                     f"cores{waited}")  # fmt: skip
    return lines


def open_loop(base: str, work: Path, rates: list[float], seconds: float) -> list[dict[str, Any]]:
    found = []
    plugins = Plugins(get_plugin_manager())
    for rate in rates:
        tasks = write_tasks(work / "open.jsonl", max(int(rate * seconds), 20))
        strategy = make_strategy(plugins, "constant", {"request_rate": rate}, None)
        summary = asyncio.run(collect(base, tasks, work / "open-out.jsonl", strategy))
        arrivals = summary["arrivals"]
        found.append({"target": rate, "achieved": arrivals["achieved_per_s"], "share": arrivals["achieved_share"],
                      "late_p99_s": arrivals["late_p99_s"], "sent": arrivals["sent"],
                      "stopped": summary.get("stopped")})  # fmt: skip
    return found


def workers(base: str, work: Path, requests: int, concurrency: int, repeats: int) -> list[dict[str, Any]]:
    tasks = write_tasks(work / "w.jsonl", requests)
    found = []
    for repeat in range(repeats):
        for count in (1, 2):
            out = work / f"w-{count}-{repeat}.jsonl"
            command = [sys.executable, "-m", "gymbench.cli", "collect", "+backend=openai", f"+base_url={base}/v1",
                       "+model=known", "+api=chat", "+stream=true", f"+input_jsonl_fpath={tasks}",
                       f"+output_jsonl_fpath={out}", f"+num_samples_in_parallel={concurrency}",
                       f"+num_workers={count}", "+progress=false", "+save_results=false", "+overwrite=true",
                       "+scrape_metrics=false"]  # fmt: skip
            started = time.perf_counter()
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env={**os.environ,
                                  "PYTHONPATH": str(ROOT)})  # fmt: skip
            wall = time.perf_counter() - started
            if done.returncode:
                raise SystemExit(f"gymbench collect failed: {done.stderr[-2000:]}")
            rate = next((line for line in done.stderr.splitlines() if "rollouts/s" in line), "")
            found.append({"num_workers": count, "repeat": repeat, "wall_s": wall, "line": rate,
                          "rollouts_per_s": float(rate.split()[0]) if rate else None})  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--open-seconds", type=float, default=5.0)
    parser.add_argument("--worker-requests", type=int, default=3000)
    parser.add_argument("--worker-repeats", type=int, default=2)
    parser.add_argument("--skip", nargs="*", default=[], choices=["closed", "open", "workers"])
    parser.add_argument("--out", type=Path, default=ROOT / "benches/study/runs/latency_truth.json")
    args = parser.parse_args()
    result: dict[str, Any] = {"load_before": os.getloadavg()}
    server, base = start_server()
    fast, fast_base = start_server("--ttft-base-ms", "2", "--ttft-exp-ms", "0", "--itl-ms", "0.5", "--tokens", "4")
    try:
        with tempfile.TemporaryDirectory() as scratch:
            work = Path(scratch)
            if "closed" not in args.skip:
                result["closed"] = [closed_loop(base, work, c, args.runs, args.requests) for c in (8, 32)]
            if "open" not in args.skip:
                result["open"] = open_loop(base, work, [10.0, 50.0, 200.0], args.open_seconds)
            if "workers" not in args.skip:
                result["workers"] = workers(fast_base, work, args.worker_requests, 64, args.worker_repeats)
    finally:
        server.kill()
        fast.kill()
    result["load_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"load average before {result['load_before']}, after {result['load_after']}")
    for closed in result.get("closed", []):
        print("\n".join(closed_loop_table(closed)))
    for row in result.get("open", []):
        print(f"open loop constant {row['target']:g} req/s: achieved {row['achieved']:.2f} "
              f"({row['share']:.1%}), p99 {row['late_p99_s'] * 1e3:.1f} ms behind schedule, {row['sent']} sent"
              + (f", stopped: {row['stopped']}" if row["stopped"] else ""))  # fmt: skip
    for row in result.get("workers", []):
        print(f"num_workers={row['num_workers']} (repeat {row['repeat']}): {row['line']}")


if __name__ == "__main__":
    main()
