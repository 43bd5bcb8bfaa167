"""The three gates of the study, each judged on the runs ``collect_runs.py`` saved.

Every function returns rates as ``(hits, trials)``; ``gate_study.py`` formats them. The rules are
gymbench's own comparisons, called as the commands call them:

* stored-run gate: ``compare_runs`` of one saved run against another, calibrated on held-out A/A runs;
* instruction gate: ``compare_runs`` of the ``instructions`` metric (1 % minimum effect);
* A/B gate: ``compare_paired`` of three worker pairs (``gymbench compare --ab``), calibrated on
  held-out A/A worker pairs.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from gymbench.gate.calibrate import learn_noise
from gymbench.gate.compare import compare_runs, detectable_change
from gymbench.gate.noise import NoiseTable
from gymbench.gate.paired import ABMeasurements, PairedRounds, compare_paired, learn_paired_noise
from gymbench.gate.paired import paired_detectable_change as ab_mde
from gymbench.gate.settings import CompareSettings
from gymbench.record import ResultsRecord

Rate = tuple[int, int]
SLOWDOWNS = (0.05, 0.10, 0.20)


def case_of(bench_id: str) -> str:
    return bench_id.rsplit("case=", 1)[-1].rstrip("]")


def flagged(suite: object, case: str | None = None) -> bool:
    """Anything flagged in the suite (A/A), or the slowed case flagged as regressed."""
    comparisons = suite.comparisons  # type: ignore[attr-defined]
    if case is None:
        return any(c.verdict in ("regressed", "improved") for c in comparisons)
    return any(case_of(c.benchmark) == case and c.verdict == "regressed" for c in comparisons)


# --------------------------------------------------------------------------- stored runs


def stored_gate(aa: list[ResultsRecord], slow: dict[str, ResultsRecord], calibration_runs: int) -> dict[str, object]:
    """Today's gate: one saved run against one, the calibration learned from other A/A runs."""
    step = max(1, len(aa) // calibration_runs)
    calib = aa[::step][:calibration_runs]
    held = [r for r in aa if not any(r is c for c in calib)]
    noise = learn_noise(calib, aa[0].fingerprint["machine"]["key"], "study")
    settings = CompareSettings()
    pairs = list(itertools.combinations(held, 2))
    false_alarms = (sum(flagged(compare_runs([a], [b], settings, noise)) for a, b in pairs), len(pairs))
    rng, detection = random.Random(1), {}
    for fraction in SLOWDOWNS:
        hits = trials = 0
        for name, record in slow.items():
            case, pct = name.split("-")[1], int(name.rsplit("-", 1)[1])
            if pct != round(fraction * 100):
                continue
            for base in rng.sample(held, 3):
                hits += flagged(compare_runs([base], [record], settings, noise), case)
                trials += 1
        detection[fraction] = (hits, trials)
    return {"aa": false_alarms, "detection": detection, "mde": _stored_mde(noise, settings), "held": len(held)}


def _stored_mde(noise: NoiseTable, settings: CompareSettings) -> dict[str, float]:
    found = {}
    for bench_id, by_metric in noise.metrics.items():
        sd, df = noise.moderated(bench_id, "time") or (math.inf, 1.0)
        found[case_of(bench_id)] = detectable_change(sd, df, settings) if "time" in by_metric else math.nan
    return found


# --------------------------------------------------------------------------- instruction counts


def counts_only(record: ResultsRecord) -> ResultsRecord:
    benches = [replace(b, metrics={"instructions": b.metrics["instructions"]}) for b in record.benchmarks]
    return replace(record, benchmarks=benches)


def with_case_from(record: ResultsRecord, donor: ResultsRecord, case: str) -> ResultsRecord:
    """``record`` with one case's results taken from ``donor`` (counts of cases are independent)."""
    taken = {b.id: b for b in donor.benchmarks}
    return replace(record, benchmarks=[taken[b.id] if case_of(b.id) == case else b for b in record.benchmarks])


def instruction_gate(aa: list[ResultsRecord], slow: dict[float, ResultsRecord], calibration_runs: int) -> dict:
    """Calibrated on some A/A runs, judged on pairs of the others; each case slowed alone."""
    aa = [counts_only(r) for r in aa]
    calib, held = aa[:calibration_runs], aa[calibration_runs:]
    noise = learn_noise(calib, aa[0].fingerprint["machine"]["key"], "study")
    settings = CompareSettings()
    pairs = list(itertools.combinations(held, 2))
    false_alarms = (sum(flagged(compare_runs([a], [b], settings, noise)) for a, b in pairs), len(pairs))
    all_pairs = list(itertools.combinations(aa, 2))
    uncalibrated = (sum(flagged(compare_runs([a], [b], settings)) for a, b in all_pairs), len(all_pairs))
    cases = [case_of(b.id) for b in aa[0].benchmarks]
    detection, realised = {}, {}
    for fraction, record in slow.items():
        record = counts_only(record)
        hits = trials = 0
        for index, base in enumerate(held):
            other = held[(index + 1) % len(held)]
            for case in cases:
                hits += flagged(compare_runs([base], [with_case_from(other, record, case)], settings, noise), case)
                trials += 1
        detection[fraction] = (hits, trials)
        realised[fraction] = {
            case_of(b.id): _ratio(aa, b.id, b.metrics["instructions"].value) for b in record.benchmarks
        }
    spread = {case_of(b): _log_spread(aa, b) for b in (x.id for x in aa[0].benchmarks)}
    mde = {}
    for bench_id in noise.metrics:
        sd, df = noise.moderated(bench_id, "instructions") or (math.inf, 1.0)
        mde[case_of(bench_id)] = detectable_change(sd, df, settings)
    return {"aa": false_alarms, "aa_uncalibrated": uncalibrated, "detection": detection, "realised": realised,
            "spread": spread, "mde": mde, "held": len(held)}  # fmt: skip


def _ratio(aa: list[ResultsRecord], bench_id: str, value: float) -> float:
    return value / float(np.median([r.benchmark(bench_id).metrics["instructions"].value for r in aa]))


def _log_spread(aa: list[ResultsRecord], bench_id: str) -> tuple[float, float]:
    """(sd of the runs' medians, the largest bracket-to-bracket spread within one run), as fractions."""
    medians = [math.log(r.benchmark(bench_id).metrics["instructions"].value) for r in aa]
    within = max(float(np.ptp(np.log(r.benchmark(bench_id).metrics["instructions"].samples))) for r in aa)
    return float(np.std(medians, ddof=1)), within


# --------------------------------------------------------------------------- interleaved A/B


def load_ab(path: Path) -> dict[tuple[str, str], list[PairedRounds]]:
    raw = json.loads(path.read_text())
    return {tuple(k.split("|")): [PairedRounds(tuple(r["base"]), tuple(r["cand"])) for r in v] for k, v in raw.items()}


def as_measurements(repeats: Sequence[dict[tuple[str, str], PairedRounds]]) -> ABMeasurements:
    data = ABMeasurements()
    for repeat in repeats:
        for key, rounds in repeat.items():
            data.add(key, rounds)  # type: ignore[arg-type]
    return data


def split_repeats(jobs: list[dict[tuple[str, str], list[PairedRounds]]]) -> list[dict[tuple[str, str], PairedRounds]]:
    """Every worker pair of every job, as its own measurement of every benchmark."""
    return [{key: rounds[i] for key, rounds in job.items()} for job in jobs for i in range(_pairs_in(job))]


def _pairs_in(job: dict[tuple[str, str], list[PairedRounds]]) -> int:
    return len(next(iter(job.values())))


def ab_gate(aa_jobs: list[Path], slow_jobs: dict[float, list[Path]], calibration_jobs: int, draws: int) -> dict:
    """A/A and slowed comparisons as run (three pairs per job) and resampled (any three held-out pairs)."""
    aa = [load_ab(p) for p in aa_jobs]
    calib, held = aa[:calibration_jobs], aa[calibration_jobs:]
    noise = learn_paired_noise(as_measurements(split_repeats(calib)), "study", "study A/A pairs")
    settings, rng = CompareSettings(), random.Random(2)
    held_pairs = split_repeats(held)
    as_run = (sum(flagged(compare_paired(as_measurements(split_repeats([j])), settings, noise)) for j in held),
              len(held))  # fmt: skip
    triples = [rng.sample(held_pairs, 3) for _ in range(draws)]
    resampled = (sum(flagged(compare_paired(as_measurements(t), settings, noise)) for t in triples), draws)
    wall_flags = [flagged(compare_paired(as_measurements(t), settings, noise, gate_wall_time=True)) for t in triples]
    with_wall = (sum(wall_flags), draws)
    detection, realised = {}, {}
    for fraction, paths in slow_jobs.items():
        slowed = [load_ab(p) for p in paths]
        slowed_pairs = split_repeats(slowed)
        keys = list(slowed[0])
        cases = sorted({case_of(b) for b, _ in keys})
        hits_run = trials_run = hits = trials = 0
        for job in slowed:
            for case in cases:
                hits_run += _detected(split_repeats([job]), rng.sample(held_pairs, 3), case, settings, noise)
                trials_run += 1
        for _ in range(max(1, draws // len(cases))):
            chosen = rng.sample(slowed_pairs, 3)
            for case in cases:
                hits += _detected(chosen, rng.sample(held_pairs, 3), case, settings, noise)
                trials += 1
        per_case = _per_case(slowed_pairs, held_pairs, cases, settings, noise, rng)
        detection[fraction] = {"as_run": (hits_run, trials_run), "resampled": (hits, trials), "per_case": per_case}
        realised[fraction] = {
            (case_of(b), m): math.expm1(float(np.median([p[(b, m)].effect for p in slowed_pairs]))) for b, m in keys
        }
    mde = {
        (case_of(b), m): ab_mde(*(noise.moderated(b, m) or (math.inf, 1.0)), settings, 3)
        for b, by in noise.metrics.items()
        for m in by
    }
    return {
        "aa_as_run": as_run, "aa_resampled": resampled, "aa_with_wall": with_wall, "detection": detection,
        "realised": realised, "mde": mde, "calibration_pairs": sum(_pairs_in(j) for j in calib),
        "held_pairs": len(held_pairs),
    }  # fmt: skip


def _detected(
    slowed: list[dict[tuple[str, str], PairedRounds]],
    others: list[dict[tuple[str, str], PairedRounds]],
    case: str,
    settings: CompareSettings,
    noise: NoiseTable,
) -> bool:
    """The suite as a CI job would see it: this case slowed, every other case from A/A pairs."""
    mixed = [{k: (s[k] if case_of(k[0]) == case else o[k]) for k in o} for s, o in zip(slowed, others, strict=True)]
    return flagged(compare_paired(as_measurements(mixed), settings, noise), case)


def _per_case(
    slowed_pairs: list[dict[tuple[str, str], PairedRounds]],
    held_pairs: list[dict[tuple[str, str], PairedRounds]],
    cases: list[str],
    settings: CompareSettings,
    noise: NoiseTable,
    rng: random.Random,
    draws: int = 60,
) -> dict[str, Rate]:
    found = {}
    for case in cases:
        picks = [(rng.sample(slowed_pairs, 3), rng.sample(held_pairs, 3)) for _ in range(draws)]
        hits = sum(_detected(slowed, others, case, settings, noise) for slowed, others in picks)
        found[case] = (hits, draws)
    return found
