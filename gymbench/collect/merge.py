"""Joining rollout files (shards of one collection, or NeMo Gym's manual ``start_idx``/``end_idx``
splits) into one, with a check that nothing is duplicated and nothing is missing.

``cat`` joins files silently: a split collected twice, a range left out or a row cut by a kill
goes unnoticed until training reads the data. Here every row's (task_index, rollout_index) pair
is read (either tool's field names, through :func:`~gymbench.rollout.output.read_pair`), a pair
seen twice is an error naming both places, and given the tasks file and the repeats, every pair
the selection should produce must be there and no other. The output is written only when the
check passes, atomically, with each row's bytes as they were.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymbench.errors import GymbenchError
from gymbench.jsonio import AtomicFile, refuse_inputs, same_file
from gymbench.rollout.dataset import ROLLOUT_INDEX_BITS, TaskSlice, count_selected, input_identity
from gymbench.rollout.identity import fingerprint_differences, read_run_fingerprint, run_fingerprint_path
from gymbench.rollout.output import pair_key, read_pair
from gymbench.rollouts_file import RolloutsFile

SHOWN = 10
"""Problems listed by name in an error; the rest are counted."""
LINE_BITS = 40


@dataclass
class MergeReport:
    """What a merge found; ``problems`` empty means the output was written."""

    rows: int = 0
    failed_rows: int = 0
    """Rows whose ``status`` is not ``ok`` (kept: they are the collection's answer for that pair)."""
    rows_per_file: dict[str, int] = field(default_factory=dict)
    duplicates: list[str] = field(default_factory=list)
    duplicate_count: int = 0
    missing: list[tuple[int, int]] = field(default_factory=list)
    missing_count: int = 0
    unexpected: list[tuple[int, int]] = field(default_factory=list)
    unexpected_count: int = 0

    @property
    def exact(self) -> bool:
        return not (self.duplicate_count or self.missing_count or self.unexpected_count)

    def problem(self) -> str:
        """One line saying every kind of problem found, with the first few of each."""
        parts = []
        if self.duplicate_count:
            parts.append(f"{self.duplicate_count} duplicate pair(s): {'; '.join(self.duplicates)}")
        if self.missing_count:
            parts.append(f"{self.missing_count} missing pair(s) (task/rollout): {_pairs(self.missing)}")
        if self.unexpected_count:
            parts.append(f"{self.unexpected_count} pair(s) outside the selection: {_pairs(self.unexpected)}")
        return "; ".join(parts)


def _pairs(pairs: list[tuple[int, int]]) -> str:
    return ", ".join(f"{t}/{r}" for t, r in pairs[:SHOWN])


@dataclass(frozen=True)
class Expected:
    """The pairs a selection of tasks yields: contiguous task indices times the repeats."""

    first_task: int
    tasks: int
    num_repeats: int

    @classmethod
    def from_input(cls, input_path: str | os.PathLike[str], selection: TaskSlice) -> Expected:
        """Task indices count the input's non-blank rows, so the selected ones are contiguous."""
        rollouts = count_selected(input_path, selection)
        if rollouts is None:
            raise GymbenchError(f"{input_path}: is a pipe; give the tasks file itself to check the merge against")
        return cls(selection.start_idx, rollouts // selection.num_repeats, selection.num_repeats)

    def keys(self) -> set[int]:
        tasks = range(self.first_task, self.first_task + self.tasks)
        return {pair_key(t, r) for t in tasks for r in range(self.num_repeats)}


MERGE_AGAIN = (
    "; nothing was written and the files merged are unchanged. Free space (or choose another -o), "
    "then run the same merge-rollouts again"
)


def merge_rollouts(
    sources: Sequence[Path], output: Path, expected: Expected | None = None, then: str = MERGE_AGAIN
) -> MergeReport:
    """Check ``sources`` together and, when exact, write them (in order) to ``output`` atomically.

    Raise :class:`GymbenchError` naming every kind of problem (and leave ``output`` untouched)
    when a pair is duplicated, missing or unexpected; one that cannot be written (a full disk)
    ends with ``then``: what was kept and how to finish.
    """
    _check_paths(sources, output)
    report = MergeReport()
    with AtomicFile(output, then=then) as target:
        first_seen = _copy_checked(sources, target, report)
        if expected is not None:
            _compare(set(first_seen), expected, report)
        if not report.exact:
            raise GymbenchError(f"cannot merge into {output}: {report.problem()}; nothing was written")
    return report


def _check_paths(sources: Sequence[Path], output: Path) -> None:
    if not sources:
        raise GymbenchError("merge-rollouts needs at least one rollouts file")
    refuse_inputs(output, sources)
    for number, source in enumerate(sources):
        if any(same_file(source, earlier) for earlier in sources[:number]):
            raise GymbenchError(f"{source}: this rollouts file is named twice; every row in it would be a duplicate")
    for source in sources:
        if not source.is_file():
            raise GymbenchError(f"{source}: no such rollouts file")


def _copy_checked(sources: Sequence[Path], target: AtomicFile, report: MergeReport) -> dict[int, int]:
    """Copy every row, remembering where each pair was first seen (for a duplicate's message) as
    one int (file number and line), so that millions of pairs stay small."""
    first_seen: dict[int, int] = {}
    for file_number, source in enumerate(sources):
        before = report.rows
        for number, raw, row in RolloutsFile(source, then="; fix or remove the line").lines(on_cut="raise"):
            key = pair_key(*read_pair(source, number, row))
            if key in first_seen:
                report.duplicate_count += 1
                if len(report.duplicates) < SHOWN:
                    task, rollout = _split(key)
                    first = first_seen[key]
                    earlier = f"{sources[first >> LINE_BITS]}:{first & ((1 << LINE_BITS) - 1)}"
                    report.duplicates.append(f"{task}/{rollout} in {earlier} and {source}:{number}")
                continue
            first_seen[key] = (file_number << LINE_BITS) | number
            report.rows += 1
            report.failed_rows += row.get("status", "ok") != "ok"
            target.write(raw)
        report.rows_per_file[str(source)] = report.rows - before
    return first_seen


def _compare(present: set[int], expected: Expected, report: MergeReport) -> None:
    wanted = expected.keys()
    missing = sorted(wanted - present)
    unexpected = sorted(present - wanted)
    report.missing_count, report.unexpected_count = len(missing), len(unexpected)
    report.missing = [_split(key) for key in missing[:SHOWN]]
    report.unexpected = [_split(key) for key in unexpected[:SHOWN]]


def _split(key: int) -> tuple[int, int]:
    return key >> ROLLOUT_INDEX_BITS, key & ((1 << ROLLOUT_INDEX_BITS) - 1)


SPLIT_SETTINGS = ("start_idx", "end_idx", "limit")
"""What parts of one collection differ by (each is a range of it); every other defining setting must agree."""


def check_parts_alike(sources: Sequence[Path], tasks: str | None, force: bool) -> list[str]:
    """Compare how each part was made (its ``.run.json``) and return the notes to print.

    Parts collected with different settings, or (``tasks`` given) from other tasks than ``tasks``,
    are refused in one line naming them and what differs, unless ``force`` (then the line is a note).
    A part without a fingerprint (another tool's file) cannot be checked: a note says so.
    """
    notes: list[str] = []
    made: list[tuple[Path, Mapping[str, Any], bool]] = []
    for source in sources:
        sidecar = run_fingerprint_path(source)
        if not sidecar.is_file():
            notes.append(f"{source}: no {sidecar.name} beside it, so how it was collected cannot be checked")
            continue
        fingerprint, older = read_run_fingerprint(sidecar)
        made.append((source, fingerprint, older))
    problems = _differing_settings(made)
    if tasks is not None:
        problems += [problem for part in made if (problem := _other_tasks(part[0], part[1], tasks))]
    if problems and not force:
        raise GymbenchError(
            f"cannot merge parts made differently: {'; '.join(problems)}; merge only parts of one "
            "collection, or add --force to merge them anyway"
        )
    return notes + [f"merging anyway (--force): {problem}" for problem in problems]


def _settings(fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    settings = fingerprint.get("settings")
    if not isinstance(settings, Mapping):
        return {}
    return {key: value for key, value in settings.items() if key not in SPLIT_SETTINGS}


def _differing_settings(made: list[tuple[Path, Mapping[str, Any], bool]]) -> list[str]:
    if not made:
        return []
    first, first_print, first_older = made[0]
    problems = []
    for source, fingerprint, older in made[1:]:
        was, now = _settings(first_print), _settings(fingerprint)
        if first_older or older:  # an older format recorded fewer settings: compare those both have
            was, now = ({key: mapping[key] for key in was.keys() & now.keys()} for mapping in (was, now))
        differences = fingerprint_differences(was, now)
        if differences:
            shown = ", ".join(line.replace(": was ", ": ").replace(", now ", " vs ") for line in differences)
            problems.append(f"{first} and {source} differ in {shown}")
    return problems


def _other_tasks(source: Path, fingerprint: Mapping[str, Any], tasks: str) -> str | None:
    """Whether the tasks ``source`` recorded are the same rows of ``tasks`` (by content), at its range."""
    recorded, settings = fingerprint.get("input"), fingerprint.get("settings")
    if not isinstance(recorded, Mapping) or "blake2b" not in recorded or not isinstance(settings, Mapping):
        return None  # a pipe, or nothing recorded: nothing to compare
    try:
        selection = TaskSlice(
            int(settings.get("start_idx") or 0),
            None if settings.get("end_idx") is None else int(settings["end_idx"]),
            None if settings.get("limit") is None else int(settings["limit"]),
            int(settings.get("num_repeats") or 1),
        )
    except (TypeError, ValueError):
        return f"{source}: its {run_fingerprint_path(source).name} holds a task range that is not one"
    here = input_identity(tasks, selection)
    if (here.get("rows"), here.get("blake2b")) == (recorded.get("rows"), recorded.get("blake2b")):
        return None
    return f"{source} was collected from other tasks than {tasks} at its range ({_described(selection)})"


def _described(selection: TaskSlice) -> str:
    end = "end" if selection.end_idx is None else selection.end_idx
    return f"rows {selection.start_idx} to {end}" + (f", at most {selection.limit}" if selection.limit else "")
