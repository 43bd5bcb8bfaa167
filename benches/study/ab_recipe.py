"""Figures for the interleaved A/B gate as the shipped workflow runs it (``gymbench compare --ab``).

The same toy project as ``gate_recipe.py`` (tests/gate/toy_project.py), flat or ``src/`` layout,
with commits that slow ``parse_rewards`` by a calibrated 5/10/20 % of CPU time and an A/A commit
(README only). One A/B calibration of the base (``gymbench calibrate --ab base --runs N``, as the
workflow's push to the default branch makes it), then, in every repetition, each candidate
against the base with ``gymbench compare --ab base CANDIDATE --fail-on regression`` (the
workflow's command). ``test_parse``'s row of the markdown summary gives the verdict and ratio.
Results go to a JSON-lines file as they come, so a run cut short still reports.

    PYTHONPATH=$PWD python benches/study/ab_recipe.py --reps 10 --out /tmp/ab_recipe.jsonl
    PYTHONPATH=$PWD python benches/study/ab_recipe.py --summarise /tmp/ab_recipe.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.gate.toy_project import study_project

SLOWDOWNS = {"s05": 0.05, "s10": 0.10, "s20": 0.20}
CANDIDATES = ("aa", *SLOWDOWNS)
VERDICTS = ("REGRESSED", "INCONCLUSIVE", "UNGATED", "IMPROVED", "PASS")
GYMBENCH = str(Path(sys.executable).parent / "gymbench")


def gymbench(repo: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run([GYMBENCH, *args], cwd=repo, capture_output=True, text=True, timeout=1800)
    return done, time.monotonic() - started


def verdict(markdown: Path) -> dict[str, object]:
    """``test_parse``'s verdict and ratio from the comparison's markdown summary, and every other
    benchmark's verdict (their code is the same on both sides: a regression there is a false alarm)."""
    text = markdown.read_text() if markdown.exists() else ""
    rows = [line for line in text.splitlines() if line.startswith("| benches/")]
    row = next((line for line in rows if "test_parse" in line), "")
    found = next((v for v in VERDICTS if v in row.upper()), None)
    ratio = re.search(r"\b([01]\.\d{2,4})\b", row)
    others = {}
    for line in rows:
        name = line.split("|")[1].strip().split("::")[-1] + ":" + line.split("|")[2].strip()
        if "test_parse" not in line:
            others[name] = next((v for v in VERDICTS if v in line.upper()), None)
    return {"verdict": found, "ratio": float(ratio.group(1)) if ratio else None, "row": row.strip(),
            "others": others}  # fmt: skip


def run(reps: int, out: Path, layout: str, runs: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="ab-recipe-"))
    repo = study_project(root / layout, layout, SLOWDOWNS)
    store = root / "results"
    with out.open("a") as sink:
        done, seconds = gymbench(repo, "calibrate", "--ab", "base", "--runs", str(runs), "--results-dir", str(store),
                                 "benches")  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"calibration failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        sink.write(json.dumps({"kind": "calibration", "layout": layout, "runs": runs, "wall_s": seconds,
                               "load": os.getloadavg()[0], "tail": done.stdout[-1500:]}) + "\n")  # fmt: skip
        sink.flush()
        for rep in range(reps):
            for cand in CANDIDATES:
                markdown = root / f"{cand}-{rep}.md"
                load = os.getloadavg()[0]
                done, seconds = gymbench(repo, "compare", "--ab", "base", cand, "--results-dir", str(store),
                                         "--markdown", str(markdown), "--fail-on", "regression")  # fmt: skip
                row = {"kind": "compare", "rep": rep, "layout": layout, "cand": cand, "exit": done.returncode,
                       **verdict(markdown), "wall_s": seconds, "load": load}  # fmt: skip
                if done.returncode not in (0, 1, 3):
                    row["error"] = (done.stdout + done.stderr)[-1500:]
                sink.write(json.dumps(row) + "\n")
                sink.flush()


def summarise(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    compares = [r for r in rows if r["kind"] == "compare"]
    print("| layout | candidate | regressed | inconclusive | ungated | pass | median ratio | comparisons |")
    print("|---|---|---|---|---|---|---|---|")
    for layout in sorted({r["layout"] for r in compares}):
        for cand in CANDIDATES:
            these = [r for r in compares if r["layout"] == layout and r["cand"] == cand]
            if not these:
                continue
            count = {v: sum(r["verdict"] == v for r in these) for v in VERDICTS}
            ratios = [r["ratio"] for r in these if r["ratio"] is not None]
            median = f"{statistics.median(ratios):.3f}" if ratios else "-"
            n = len(these)
            print(f"| {layout} | {cand} | {count['REGRESSED']}/{n} | {count['INCONCLUSIVE']}/{n} | "
                  f"{count['UNGATED']}/{n} | {count['PASS']}/{n} | {median} | {n} |")  # fmt: skip
    # score_async awaits parse_rewards, so a slowed candidate slows it too: only A/A counts it
    others = [v for r in compares for k, v in r.get("others", {}).items()
              if r["cand"] == "aa" or not k.startswith("test_score_async")]  # fmt: skip
    print(f"unchanged benchmarks' metrics: {sum(v == 'REGRESSED' for v in others)} regressed of {len(others)} "
          f"(false alarms), {sum(v == 'INCONCLUSIVE' for v in others)} inconclusive")  # fmt: skip
    walls = [r["wall_s"] for r in compares]
    loads = [r["load"] for r in compares]
    if walls:
        print(f"compare --ab: median {statistics.median(walls):.0f} s wall ({min(walls):.0f}-{max(walls):.0f}); "
              f"load average {min(loads):.1f}-{max(loads):.1f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--runs", type=int, default=10, help="A/A worker pairs of the calibration")
    parser.add_argument("--layout", default="flat", choices=("flat", "src"))
    parser.add_argument("--out", type=Path, default=Path("ab_recipe.jsonl"))
    parser.add_argument("--summarise", type=Path)
    args = parser.parse_args()
    if args.summarise:
        summarise(args.summarise)
    else:
        run(args.reps, args.out, args.layout, args.runs)


if __name__ == "__main__":
    main()
