"""Collect the real reruns the gate study compares three gates on, in one shuffled schedule.

Three kinds of job, interleaved at random so that the machine's drift lands on all of them alike:

* ``stored``: ``pytest aa_workloads.py --gymbench-save`` in a fresh process (today's gate compares
  such runs): unchanged (A/A), or with one case slowed by 5, 10 or 20 %;
* ``instructions``: the same with ``--gymbench-instructions`` (and ``--gymbench-quick``: the counts
  do not depend on the rounds); unchanged, or with every case slowed (counts of one case do not
  depend on the others, so one run gives every case's slowed count). Each process keeps a random
  number of small objects alive (``GYMBENCH_STUDY_JITTER``): identical processes would count
  identically, while a real change elsewhere in the code leaves the allocator in another state;
* ``ab``: one interleaved A/B comparison (three worker pairs, as ``gymbench compare --ab`` runs it)
  of the workloads against themselves, unchanged or with every case slowed on the candidate side.

Every job runs with one BLAS/OpenMP thread (as the A/B workers and the callgrind child do), so
the three gates measure the same work. Every job's wall time (what the gate costs in CI) and the
load average around it are kept.

    python benches/study/collect_runs.py --out benches/study/runs
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from gymbench.gate.ab.runner import ABRunner
from gymbench.gate.ab.settings import ABSettings
from gymbench.gate.ab.sides import Side, code_path
from gymbench.gate.callgrind import DETERMINISTIC_ENV

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from injection import SLOWDOWNS, slow_spec  # noqa: E402

WORKLOADS = HERE / "aa_workloads.py"
ONE_THREAD = {name: value for name, value in DETERMINISTIC_ENV.items() if name != "PYTHONHASHSEED"}


def schedule(args: argparse.Namespace, cases: list[str]) -> list[dict[str, str]]:
    jobs = [{"kind": "stored", "name": f"aa-{i:03d}", "slow": ""} for i in range(args.stored_aa)]
    jobs += [
        {"kind": "stored", "name": f"slow-{case}-{round(s * 100):02d}", "slow": f"{case}:{s}"}
        for case in cases
        for s in SLOWDOWNS
    ]
    first = args.instr_first
    jobs += [{"kind": "instructions", "name": f"aa-{i:03d}", "slow": ""} for i in range(first, first + args.instr_aa)]
    jobs += [{"kind": "instructions", "name": f"slow-all-{round(s * 100):02d}", "slow": f"*:{s}"} for s in SLOWDOWNS]
    jobs += [{"kind": "ab", "name": f"aa-{i:03d}", "slow": ""} for i in range(args.ab_aa)]
    jobs += [
        {"kind": "ab", "name": f"slow-all-{round(s * 100):02d}-{i}", "slow": f"*:{s}"}
        for s in SLOWDOWNS
        for i in range(args.ab_slow)
    ]
    random.Random(args.seed).shuffle(jobs)
    return [job for job in jobs if not args.only or job["kind"] in args.only]


def environment_for(slow: str, injection: dict[str, dict[str, object]]) -> dict[str, str]:
    """``case:fraction`` or ``*:fraction`` turned into the loop counts ``aa_workloads`` reads."""
    if not slow:
        return {}
    case, fraction = slow.split(":")
    cases = sorted(injection) if case == "*" else [case]
    return {"GYMBENCH_STUDY_SLOW": slow_spec(injection, float(fraction), cases)}  # type: ignore[arg-type]


def jitter(rng: random.Random) -> dict[str, str]:
    """A different allocator state per process, as an unrelated code change would leave it."""
    return {"GYMBENCH_STUDY_JITTER": str(rng.randrange(5000))}


def run_pytest(job: dict[str, str], out: Path, env: dict[str, str]) -> None:
    command = [sys.executable, "-m", "pytest", str(WORKLOADS), "-q", "-p", "no:cacheprovider",
               "--gymbench-save", job["name"], "--gymbench-results-dir", str(out / job["kind"])]  # fmt: skip
    timed = job["kind"] == "stored"
    command += ["--gymbench-max-time", "1"] if timed else ["--gymbench-quick", "--gymbench-instructions"]
    subprocess.run(command, env={**os.environ, **env}, check=True, capture_output=True, cwd=REPO)


def run_ab(job: dict[str, str], out: Path, env: dict[str, str], repeats: int) -> None:
    """One A/B comparison; its paired rounds saved as JSON (per benchmark, per worker pair)."""
    base = Side("base", REPO, REPO, code_path(REPO))
    cand = Side("candidate", REPO, REPO, {**code_path(REPO), **env})
    data = ABRunner(base, cand, ABSettings(repeats=repeats)).run([str(WORKLOADS.relative_to(REPO))])
    rounds = {f"{b}|{m}": [asdict(r) for r in repeats_] for (b, m), repeats_ in data.rounds.items()}
    (out / "ab").mkdir(parents=True, exist_ok=True)
    (out / "ab" / f"{job['name']}.json").write_text(json.dumps(rounds))


def run_job(job: dict[str, str], args: argparse.Namespace, injection: dict, rng: random.Random) -> dict[str, object]:
    """Run one job; what it cost (wall seconds) and the load average around it."""
    env, load_before, started = environment_for(job["slow"], injection), os.getloadavg()[0], time.perf_counter()
    if job["kind"] == "ab":
        run_ab(job, args.out, env, args.repeats)
    else:
        run_pytest(job, args.out, {**env, **(jitter(rng) if job["kind"] == "instructions" else {})})
    wall_s = time.perf_counter() - started
    return {**job, "wall_s": wall_s, "load_before": load_before, "load_after": os.getloadavg()[0]}


def finished_jobs(log: Path) -> set[tuple[str, str]]:
    """Jobs an interrupted collection already ran: a resumed one does not run them twice."""
    if not log.exists():
        return set()
    return {(job["kind"], job["name"]) for job in map(json.loads, log.read_text().splitlines())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "runs")
    parser.add_argument("--stored-aa", type=int, default=16, help="unchanged stored runs")
    parser.add_argument("--instr-aa", type=int, default=12, help="unchanged instruction-count runs")
    parser.add_argument("--instr-first", type=int, default=0, help="number of the first (to add to earlier ones)")
    parser.add_argument("--ab-aa", type=int, default=8, help="unchanged A/B comparisons (3 worker pairs each)")
    parser.add_argument("--ab-slow", type=int, default=3, help="A/B comparisons per slowdown")
    parser.add_argument("--repeats", type=int, default=3, help="worker pairs per A/B comparison")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", action="append", choices=("stored", "instructions", "ab"), help="only these jobs")
    parser.add_argument("--resume", action="store_true", help="skip the jobs jobs.jsonl already lists")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.update(ONE_THREAD)  # every job, and the calibration below, with one BLAS thread
    injection_file = args.out / "injection.json"
    if not injection_file.exists():
        subprocess.run([sys.executable, str(HERE / "injection.py"), "--out", str(injection_file)], check=True)
    injection = json.loads(injection_file.read_text())
    done = finished_jobs(args.out / "jobs.jsonl") if args.resume else set()
    rng = random.Random(args.seed + 1 + len(done))  # a resumed collection draws other jitter than the first
    with (args.out / "jobs.jsonl").open("a") as log:
        for job in tqdm(schedule(args, sorted(injection)), desc="study jobs"):
            if (job["kind"], job["name"]) in done:
                continue
            log.write(json.dumps(run_job(job, args, injection, rng)) + "\n")
            log.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
