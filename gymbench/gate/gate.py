"""The CI gate: what a comparison means for the build, as an exit code.

``gymbench compare`` and ``pytest --gymbench-compare`` share this. pytest keeps its own exit
codes 0–5 (a failing test still wins), so the gate's codes there start at 6.

=================  ===================  ===================================
outcome            ``gymbench compare``  ``pytest --gymbench-fail-on ...``
=================  ===================  ===================================
pass               0                    pytest's own (0 when tests pass)
regression         1                    6
input/usage error  2                    4 (pytest's usage error)
inconclusive       3                    7
=================  ===================  ===================================
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from gymbench.errors import GymbenchError
from gymbench.gate.compare import SuiteComparison, compare_runs
from gymbench.gate.measured_code import refuse_same_code
from gymbench.gate.noise import NoiseTable
from gymbench.gate.settings import FAIL_ON, CompareSettings
from gymbench.gate.store import CALIBRATION_DIR, Selection, latest_calibration, load_calibration
from gymbench.record import ResultsRecord


class Outcome(enum.Enum):
    PASS = "pass"
    REGRESSION = "regression"
    INCONCLUSIVE = "inconclusive"

    @property
    def cli_code(self) -> int:
        return {"pass": 0, "regression": 1, "inconclusive": 3}[self.value]

    @property
    def pytest_code(self) -> int:
        return {"pass": 0, "regression": 6, "inconclusive": 7}[self.value]


def outcome_of(suite: SuiteComparison) -> Outcome:
    """Regression beats inconclusive; a missing or renamed benchmark, an inconclusive skip, a
    comparison in which no metric was gated, or one that compared nothing, too (no green for what
    was not gated)."""
    counts = suite.counts
    if counts["regressed"]:
        return Outcome.REGRESSION
    missing = suite.match.missing or suite.match.renamed
    if counts["inconclusive"] or missing or _judged_nothing(suite) or suite.nothing_gated or not suite.comparisons:
        return Outcome.INCONCLUSIVE  # nothing compared at all (an A/B run with nothing to interleave) is no pass
    return Outcome.PASS


def _judged_nothing(suite: SuiteComparison) -> bool:
    """Something was left out that might hide a regression (see :class:`Skipped`)."""
    return any(skipped.inconclusive for skipped in suite.skipped)


def enforced(outcome: Outcome, fail_on: str) -> Outcome:
    """What the build sees: ``none`` reports only, ``regression`` ignores inconclusive results."""
    if fail_on not in FAIL_ON:
        raise GymbenchError(f"--fail-on {fail_on!r}: choose one of {', '.join(FAIL_ON)}")
    if fail_on == "none" or (fail_on == "regression" and outcome is Outcome.INCONCLUSIVE):
        return Outcome.PASS
    return outcome


@dataclass(frozen=True)
class GateResult:
    suite: SuiteComparison
    outcome: Outcome
    """The comparison's own outcome, before ``fail_on`` is applied."""
    enforced: Outcome
    warnings: list[str] = field(default_factory=list)
    baseline_records: list[ResultsRecord] = field(default_factory=list)
    candidate_records: list[ResultsRecord] = field(default_factory=list)


def noise_for(
    results_dir: Path, machine_key: str, calibration: str | None, directory: str = CALIBRATION_DIR
) -> NoiseTable | None:
    """An explicit calibration file, else this machine's latest calibration, else none."""
    if calibration:
        return load_calibration(Path(calibration))
    return latest_calibration(results_dir, machine_key, directory)


def run_gate(
    baseline: Selection,
    candidate: Selection,
    settings: CompareSettings,
    noise: NoiseTable | None,
    fail_on: str,
) -> GateResult:
    refuse_same_code(baseline.records, candidate.records)
    suite = compare_runs(baseline.records, candidate.records, settings, noise, labels=(baseline.label, candidate.label))
    warnings = list(
        dict.fromkeys([*baseline.warnings, *candidate.warnings, *_noise_warnings(noise, suite, candidate.records)])
    )
    outcome = outcome_of(suite)
    return GateResult(
        suite, outcome, enforced(outcome, fail_on), warnings, list(baseline.records), list(candidate.records)
    )


def _noise_warnings(noise: NoiseTable | None, suite: SuiteComparison, records: list[ResultsRecord]) -> list[str]:
    """No calibration matters to the metrics whose noise it would give: time from one run a side.
    Instruction counts are gated from their own five heap layouts a run (docs/baselines.md)."""
    if noise is None and not any(c.noise_unknown for c in suite.comparisons):
        return []
    if noise is None:
        return [
            "no calibration for this machine: intervals only see noise within one run, so time metrics "
            "compared from fewer than 3 runs a side are not gated (a load change between the runs would "
            "read as a regression). Run `gymbench calibrate` once to learn the run-to-run noise "
            "(it reruns the suite, benches/ by default, 5 times: --runs N to change that; --from NAME-GLOB "
            "learns from runs already stored instead)."
        ]
    keys = {r.fingerprint.get("machine", {}).get("key") for r in records}
    if noise.machine_key not in keys:
        return [f"calibration {noise.source} was made on machine {noise.machine_key}, not the candidate's"]
    return []


def in_memory(record: ResultsRecord, label: str = "this run") -> Selection:
    return Selection([record], label)
