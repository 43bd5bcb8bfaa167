"""Figures for the instruction-count gate as the shipped workflow runs it (``gymbench gate --base``).

A toy user project (tests/gate/toy_project.py) in flat and ``src/`` layouts, with commits that
slow ``parse_rewards`` by a calibrated 5/10/20 % of CPU time and an A/A commit (README only).
Each repetition counts every commit once, the way ``gymbench gate --base`` does (a worktree of
the commit, this environment's Python, ``PYTHONPATH`` = the worktree and its ``src/`` first,
``--gymbench-quick --gymbench-instructions``), and gates each slowed commit and the A/A commit
against the base with the same code path (``run_gate``, instruction counts, ``--fail-on
regression``). Results go to a JSON-lines file as they come, so a run cut short still reports,
and a rerun on the same file appends only the (rep, layout) pairs it lacks (``--reps`` is the total).

    PYTHONPATH=$PWD python benches/study/gate_recipe.py --reps 10 --out /tmp/gate_recipe.jsonl
    PYTHONPATH=$PWD python benches/study/gate_recipe.py --summarise /tmp/gate_recipe.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.gate.toy_project import git, study_project

SLOWDOWNS = {"s05": 0.05, "s10": 0.10, "s20": 0.20}
COMMITS = ("base", "aa", *SLOWDOWNS)
LAYOUTS = ("flat", "src")
SELECT = "parse"


def cpu_ratio(fraction: float, rounds: int = 40) -> float:
    """CPU-time ratio of ``parse_rewards`` with ``fraction`` extra work to none, interleaved."""
    from tests.gate import toy_project

    def load(slowdown: float) -> dict[str, object]:
        namespace: dict[str, object] = {}
        exec(toy_project.PACKAGE.format(slowdown=slowdown), namespace)
        return namespace

    lines = [f'{{"reward": {i % 5}, "id": {i}}}' for i in range(400)]
    base, slow = load(0.0)["parse_rewards"], load(fraction)["parse_rewards"]
    ratios = []
    for _ in range(rounds):
        times = []
        for fn in (base, slow):
            start = time.process_time()
            for _ in range(200):
                fn(lines)  # type: ignore[operator]
            times.append(time.process_time() - start)
        ratios.append(times[1] / times[0])
    return statistics.median(ratios)


def count(repo: Path, ref: str, layout: str, store: Path, name: str) -> float:
    """Count ``ref`` as ``gymbench gate --base`` does; the wall seconds it took."""
    with tempfile.TemporaryDirectory(prefix="gate-recipe-") as tmp:
        tree = Path(tmp) / "tree"
        git(repo, "worktree", "add", "--detach", "--quiet", str(tree), ref)
        paths = [str(tree)] + ([str(tree / "src")] if layout == "src" else [])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])}
        command = [sys.executable, "-m", "pytest", "benches/", "-k", SELECT, "-q", "-p", "no:cacheprovider"]
        command += ["--gymbench-quick", "--gymbench-instructions", "--gymbench-save", name]
        command += ["--gymbench-results-dir", str(store)]
        started = time.monotonic()
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - started
        git(repo, "worktree", "remove", "--force", str(tree))
    if done.returncode != 0:
        raise SystemExit(f"count of {ref} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return seconds


def gate(store: Path, base: str, cand: str) -> dict[str, object]:
    from gymbench.fingerprint import machine_info
    from gymbench.gate.gate import run_gate
    from gymbench.gate.settings import CompareSettings
    from gymbench.gate.store import BaselineStore

    key = machine_info()["key"]
    selections = [BaselineStore(store).select(name, key) for name in (base, cand)]
    result = run_gate(*selections, CompareSettings(metrics=("instructions",)), None, "regression")
    found = [c for c in result.suite.comparisons if c.benchmark.endswith("test_parse")]
    if not found:  # not counted on a side: the gate says why, inconclusive
        return {"outcome": result.outcome.value, "ratio": None, "why": [s.why for s in result.suite.skipped]}
    (parse,) = found
    return {"outcome": result.outcome.value, "ratio": parse.ratio, "interval": parse.interval, "q": parse.q}


def recorded(out: Path) -> set[tuple[int, str]]:
    """The (rep, layout) pairs ``out`` already holds, so that a rerun appends only the missing ones."""
    if not out.exists():
        return set()
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {(r["rep"], r["layout"]) for r in rows if r["kind"] == "gate"}


def run(reps: int, out: Path, layouts: tuple[str, ...] = LAYOUTS) -> None:
    root = Path(tempfile.mkdtemp(prefix="gate-recipe-"))
    repos = {}
    for layout in layouts:
        repos[layout] = study_project(root / layout, layout, SLOWDOWNS)
    done = recorded(out)
    counted: set[tuple[str, str]] = set()  # (layout, run name) counted into this run's stores
    with out.open("a") as sink:
        for tag, fraction in SLOWDOWNS.items() if not out.stat().st_size else ():
            sink.write(json.dumps({"kind": "cpu", "tag": tag, "cpu_ratio": cpu_ratio(fraction)}) + "\n")
            sink.flush()
        for rep in range(reps):
            for layout, repo in repos.items():
                if (rep, layout) in done:
                    continue
                store = root / f"results-{layout}"
                load = os.getloadavg()[0]
                if rep and (layout, f"base-r{rep - 1}") not in counted:
                    # continuing a file: the previous rep's base is not in this run's store, and
                    # base-again needs one, so count the base once more under that name
                    count(repo, "base", layout, store, f"base-r{rep - 1}")
                seconds = {ref: count(repo, ref, layout, store, f"{ref}-r{rep}") for ref in COMMITS}
                counted |= {(layout, f"{ref}-r{rep}") for ref in COMMITS}
                for ref in COMMITS[1:]:
                    found = gate(store, f"base-r{rep}", f"{ref}-r{rep}")
                    row = {"kind": "gate", "rep": rep, "layout": layout, "cand": ref, **found, "load": load}
                    sink.write(json.dumps({**row, "seconds": seconds}) + "\n")
                if rep:
                    found = gate(store, f"base-r{rep - 1}", f"base-r{rep}")
                    sink.write(json.dumps({"kind": "gate", "rep": rep, "layout": layout, "cand": "base-again",
                                           **found, "load": load, "seconds": seconds}) + "\n")  # fmt: skip
                sink.flush()


def summarise(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    cpu = {r["tag"]: r["cpu_ratio"] for r in rows if r["kind"] == "cpu"}
    gates = [r for r in rows if r["kind"] == "gate"]
    print("| layout | candidate | CPU time | counts (median ratio) | regression | inconclusive | gates |")
    print("|---|---|---|---|---|---|---|")
    for layout in LAYOUTS:
        for cand in ("s05", "s10", "s20", "aa", "base-again"):
            these = [r for r in gates if r["layout"] == layout and r["cand"] == cand]
            if not these:
                continue
            flagged = sum(r["outcome"] == "regression" for r in these)
            unsure = sum(r["outcome"] == "inconclusive" for r in these)
            ratio = statistics.median(r["ratio"] for r in these if r["ratio"] is not None)
            shown = f"{cpu[cand]:.3f}" if cand in cpu else "1 (same code)"
            n = len(these)
            print(f"| {layout} | {cand} | {shown} | {ratio:.4f} | {flagged}/{n} | {unsure}/{n} | {n} |")
    seconds = [s for r in gates if r["cand"] == "aa" for s in [r["seconds"]["base"]]]
    loads = [r["load"] for r in gates]
    if seconds:
        wall = f"median {statistics.median(seconds):.0f} s wall, range {min(seconds):.0f}-{max(seconds):.0f} s"
        print(f"counted run (1 benchmark, quick): {wall}; load average {min(loads):.1f}-{max(loads):.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("gate_recipe.jsonl"))
    parser.add_argument("--summarise", type=Path)
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="flat,src (the order they are counted in)")
    args = parser.parse_args()
    if args.summarise:
        summarise(args.summarise)
    else:
        run(args.reps, args.out, tuple(args.layouts.split(",")))


if __name__ == "__main__":
    main()
