"""An A/B comparison or calibration from start to finish: checkouts, workers, statistics, verdict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from gymbench.gate.ab.runner import ABRunner
from gymbench.gate.ab.settings import ABSettings
from gymbench.gate.ab.sides import Checkouts, Side
from gymbench.gate.gate import GateResult
from gymbench.gate.noise import NoiseTable
from gymbench.gate.paired import ABMeasurements, learn_paired_noise, paired_gate
from gymbench.gate.settings import CompareSettings


def measure_ab(
    start: Path,
    base_ref: str,
    cand_ref: str | None,
    pytest_args: Sequence[str],
    settings: ABSettings,
    only: set[str] | None = None,
    cand_env: Mapping[str, str] | None = None,
) -> tuple[ABMeasurements, tuple[Side, Side], list[str]]:
    """``base_ref`` against ``cand_ref`` (the working tree when ``None``), interleaved."""
    with Checkouts(start) as checkouts:
        base = checkouts.side("base", base_ref)
        cand = checkouts.side("candidate", cand_ref, cand_env)
        warnings = checkouts.environment_warnings(base, cand)
        return ABRunner(base, cand, settings).run(pytest_args, only), (base, cand), warnings


def ab_gate(
    start: Path,
    base_ref: str,
    cand_ref: str | None,
    pytest_args: Sequence[str],
    settings: ABSettings,
    compare: CompareSettings,
    noise: NoiseTable | None,
    fail_on: str,
    only: set[str] | None = None,
) -> GateResult:
    data, (base, cand), warnings = measure_ab(start, base_ref, cand_ref, pytest_args, settings, only)
    labels = (base.label, cand.label)
    return paired_gate(data, compare, noise, fail_on, labels, warnings, settings.gate_wall_time)


def calibrate_ab(
    start: Path, ref: str | None, pytest_args: Sequence[str], settings: ABSettings, machine_key: str
) -> tuple[NoiseTable, ABMeasurements]:
    """A/A: the same checkout on both sides, ``settings.repeats`` worker pairs."""
    with Checkouts(start) as checkouts:
        side = checkouts.side("A/A", ref)
        data = ABRunner(side, side, settings).run(pytest_args)
    return learn_paired_noise(data, machine_key, source=f"A/A of {side.label}"), data
