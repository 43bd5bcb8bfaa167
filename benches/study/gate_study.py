"""Three regression gates on the same real reruns: stored runs, instruction counts, interleaved A/B.

Reads what ``collect_runs.py`` saved and reports, for each gate: the share of whole-suite A/A
comparisons (unchanged code) that flag anything, the share of real injected slowdowns (5, 10,
20 % of a case's time, a pure-Python loop) that it flags, what one comparison costs in CI time,
and per benchmark the smallest change it can detect (MDE).

    python benches/study/gate_study.py --runs benches/study/runs --out benches/study/figures.md
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from study_gates import SLOWDOWNS, Rate, ab_gate, instruction_gate, stored_gate  # noqa: E402

from gymbench.gate.store import BaselineStore  # noqa: E402


def rate(hits_trials: Rate) -> str:
    hits, trials = hits_trials
    return f"{hits / trials:.1%} ({hits}/{trials})" if trials else "n/a"


def pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.1%}" if x < 10 else "> 1000%"


def conditions(runs: Path) -> dict[str, Any]:
    jobs = [json.loads(line) for line in (runs / "jobs.jsonl").read_text().splitlines()]
    loads = [j["load_before"] for j in jobs] + [j["load_after"] for j in jobs]
    kinds = {j["kind"] for j in jobs}
    walls = {kind: statistics.median(j["wall_s"] for j in jobs if j["kind"] == kind) for kind in kinds}
    return {"jobs": len(jobs), "load": (min(loads), statistics.median(loads), max(loads)), "wall_s": walls,
            "total_s": sum(j["wall_s"] for j in jobs)}  # fmt: skip


def analyse(runs: Path, draws: int) -> dict[str, Any]:
    stored = BaselineStore(runs / "stored").runs()
    instr = BaselineStore(runs / "instructions").runs()
    ab_files = sorted((runs / "ab").glob("*.json"))
    return {
        "conditions": conditions(runs),
        "stored": stored_gate(
            [r.record for r in stored if r.name.startswith("aa-")],
            {r.name: r.record for r in stored if r.name.startswith("slow-")},
            calibration_runs=8,
        ),
        "instructions": instruction_gate(
            [r.record for r in instr if r.name.startswith("aa-")],
            {f: next(r.record for r in instr if r.name == f"slow-all-{round(f * 100):02d}") for f in SLOWDOWNS},
            calibration_runs=5,
        ),
        "ab": ab_gate(
            [p for p in ab_files if p.name.startswith("aa-")],
            {f: [p for p in ab_files if p.name.startswith(f"slow-all-{round(f * 100):02d}-")] for f in SLOWDOWNS},
            calibration_jobs=4,
            draws=draws,
        ),
    }


def summary_table(found: dict[str, Any]) -> list[str]:
    walls = found["conditions"]["wall_s"]
    stored, instr, ab = found["stored"], found["instructions"], found["ab"]
    rows = [
        ("stored runs, 1 vs 1 (today's gate, calibrated)", rate(stored["aa"]),
         *(rate(stored["detection"][f]) for f in SLOWDOWNS), f"{walls['stored']:.0f} s per run (x2: base and PR)"),
        ("instruction counts (callgrind, 1 % min effect, calibrated)", rate(instr["aa"]),
         *(rate(instr["detection"][f]) for f in SLOWDOWNS), f"{walls['instructions']:.0f} s per run (x2)"),
        ("instruction counts, uncalibrated (all A/A pairs)", rate(instr["aa_uncalibrated"]), "", "", "", ""),
        ("interleaved A/B (CPU time), 3 worker pairs, as run", rate(ab["aa_as_run"]),
         *(rate(ab["detection"][f]["as_run"]) for f in SLOWDOWNS), f"{walls['ab']:.0f} s per comparison"),
        ("interleaved A/B, 3 worker pairs, resampled", rate(ab["aa_resampled"]),
         *(rate(ab["detection"][f]["resampled"]) for f in SLOWDOWNS), "(same)"),
        ("interleaved A/B gating wall time too, resampled", rate(ab["aa_with_wall"]), "", "", "", ""),
    ]  # fmt: skip
    head = ("gate", "A/A: suites flagging anything (≤ 1 %)", "5 % found", "10 % found (≥ 95 %)", "20 % found",
            "CI time")  # fmt: skip
    return _markdown([head, *rows])


def case_table(found: dict[str, Any]) -> list[str]:
    stored, instr, ab = found["stored"], found["instructions"], found["ab"]
    head = ("case", "stored: MDE", "counts: run sd / in-run spread", "counts: MDE", "counts: +% at 10 %",
            "A/B: MDE cpu / wall", "A/B: cpu +% at 10 %", "A/B: 10 % found", "gates that see 10 %")  # fmt: skip
    rows = [head]
    for case in sorted(stored["mde"]):
        run_sd, within = instr["spread"][case]
        cpu, wall = ab["mde"].get((case, "time_cpu"), math.nan), ab["mde"].get((case, "time"), math.nan)
        counted, counts_mde = instr["realised"][0.1][case] - 1, instr["mde"].get(case, math.nan)
        covered = [name for name, ok in (("stored", stored["mde"][case] <= 0.1),
                                         ("counts", max(counts_mde, 0.01) <= counted),
                                         ("A/B", min(cpu, wall) <= 0.1)) if ok]  # fmt: skip
        rows.append((case, pct(stored["mde"][case]), f"{run_sd:.3%} / {within:.2%}", pct(counts_mde),
                     f"{counted:+.0%}", f"{pct(cpu)} / {pct(wall)}", f"{ab['realised'][0.1][(case, 'time_cpu')]:+.1%}",
                     rate(ab["detection"][0.1]["per_case"][case]), ", ".join(covered) or "**none**"))  # fmt: skip
    return _markdown(rows)


def _markdown(rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    return lines + ["| " + " | ".join(row) + " |" for row in rows[1:]] + [""]


def plot(found: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {
        "stored runs (today)": [found["stored"]["detection"][f] for f in SLOWDOWNS],
        "instruction counts": [found["instructions"]["detection"][f] for f in SLOWDOWNS],
        "interleaved A/B": [found["ab"]["detection"][f]["resampled"] for f in SLOWDOWNS],
    }
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for label, rates in series.items():
        ax.plot([f * 100 for f in SLOWDOWNS], [100 * h / t for h, t in rates], marker="o", label=label)
    ax.axhline(95, color="grey", linestyle=":", linewidth=1)
    ax.set(xlabel="injected slowdown of one case (% of its time)", ylabel="slowdowns found (%)", ylim=(-3, 103))
    ax.set_title("Detection on a shared 2-core VM, same reruns", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _jsonable(value: Any) -> Any:
    """Tuple keys (case, metric) joined, rates as lists: the figures as plain JSON."""
    if isinstance(value, dict):
        return {"|".join(map(str, k)) if isinstance(k, tuple) else str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value if not isinstance(value, float) or math.isfinite(value) else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, default=HERE / "runs")
    parser.add_argument("--out", type=Path, default=HERE / "figures.md")
    parser.add_argument("--plot", type=Path, default=HERE.parent.parent / "docs" / "images" / "gate-study.png")
    parser.add_argument("--draws", type=int, default=400, help="resampled A/B comparisons")
    args = parser.parse_args()
    found = analyse(args.runs, args.draws)
    c = found["conditions"]
    lines = [
        f"{c['jobs']} jobs in {c['total_s'] / 60:.0f} min on this 2-core VM, shared with other work: load average "
        f"{c['load'][0]:.1f} to {c['load'][2]:.1f} (median {c['load'][1]:.1f}). Stored-run gate: "
        f"{found['stored']['held']} held-out A/A runs (8 more only calibrate). Instruction gate: "
        f"{found['instructions']['held']} held-out A/A runs (5 more only calibrate). A/B gate: calibrated on "
        f"{found['ab']['calibration_pairs']} A/A worker pairs, evaluated on {found['ab']['held_pairs']} others.",
        "",
        *summary_table(found),
        *case_table(found),
    ]
    print("\n".join(lines))
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (args.runs / "figures.json").write_text(json.dumps(_jsonable(found), indent=1))  # the raw rates, beside the runs
    plot(found, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
