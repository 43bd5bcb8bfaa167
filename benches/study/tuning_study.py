"""The tuning study: the sweep and the adaptive search on unseen simulator profiles, against their truth.

Run: ``python benches/study/tuning_study.py [--seeds 3] [--profiles u8,e24,...]``. Every tune runs in
simulated time against the profile's in-process engine (:mod:`tuning_profiles`), so a figure does
not depend on this machine's load; "wall" is the simulated seconds a tune took, which is what it
would take against a server that fast. The truth is the dense grid of closed loops cached in
``tuning_truth.json``. Writes ``runs/tuning_study.json`` (every run; not committed: docs/tuning.md has the
table) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tuning_profiles import PROFILES, Scored, score, truth_for, tune_simulated  # noqa: E402

from gymbench.jsonio import write_json_atomic  # noqa: E402

OUT = HERE / "runs" / "tuning_study.json"


def run_study(names: list[str], seeds: int) -> list[Scored]:
    from tqdm import tqdm

    rows: list[Scored] = []
    OUT.parent.mkdir(parents=True, exist_ok=True)
    jobs = [(name, method, seed) for name in names for seed in range(seeds) for method in ("sweep", "adaptive")]
    for name, method, seed in tqdm(jobs, desc="tunes", unit="tune"):
        profile = PROFILES[name]
        rows.append(score(profile, truth_for(profile), tune_simulated(profile, method, seed), seed))
        write_json_atomic(OUT, [asdict(r) for r in rows])
    return rows


def table(rows: list[Scored], names: list[str]) -> str:
    lines = [
        "| profile | true knee (grid / formula) | sweep knee error | adaptive knee error | sweep delivered "
        "| adaptive delivered | sweep wall (s) | adaptive wall (s) | adaptive ÷ sweep wall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        truth = truth_for(PROFILES[name])
        mine = {m: [r for r in rows if r.profile == name and r.method == m] for m in ("sweep", "adaptive")}

        def errors(method: str, mine: dict[str, list[Scored]] = mine) -> str:
            return ", ".join(f"{r.knee_error:+.0%}" for r in mine[method])

        def delivered(method: str, mine: dict[str, list[Scored]] = mine) -> str:
            return ", ".join(f"{r.delivered_share:.0%}" for r in mine[method])

        walls = {m: statistics.median(r.wall_s for r in mine[m]) for m in mine}
        lines.append(
            f"| {name} | {truth.knee:.1f} / {truth.formula_knee:.1f} | {errors('sweep')} | {errors('adaptive')} | "
            f"{delivered('sweep')} | {delivered('adaptive')} | {walls['sweep']:.0f} | {walls['adaptive']:.0f} | "
            f"{walls['adaptive'] / walls['sweep']:.2f} |"
        )
    for method in ("sweep", "adaptive"):
        errs = [r.knee_error for r in rows if r.method == method]
        shares = [r.delivered_share for r in rows if r.method == method]
        covered = sum(r.covered for r in rows if r.method == method)
        lines.append(
            f"\n{method}: knee error median {statistics.median(errs):+.1%}, worst {max(errs, key=abs):+.1%}; "
            f"delivered median {statistics.median(shares):.1%}, lowest {min(shares):.1%}; true knee inside the "
            f"95% interval in {covered} of {len(errs)} tunes"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--profiles", default=",".join(PROFILES))
    args = parser.parse_args()
    names = args.profiles.split(",")
    rows = run_study(names, args.seeds)
    print(table(rows, names))


if __name__ == "__main__":
    main()
