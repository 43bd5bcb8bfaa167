"""The baseline store: results records under ``results/<machine key>/<UTC time>_<name>.json``.

A baseline is chosen by file path, by name (the latest run saved under it), by a glob over names
(every match, as repeated runs), by git ref (every run of that commit), or ``latest`` (the newest
run on this machine). A baseline from another machine is used with a warning rather than an
error: an honest comparison across machines is worth less, not nothing.
Calibrations live beside the records, in ``results/<machine key>/calibration/`` (stored runs) and
``calibration-ab/`` (interleaved A/B runs).
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from gymbench.console import printable
from gymbench.errors import GymbenchError, ResultsFileError
from gymbench.gate.noise import NoiseTable, noise_from_dict, noise_to_dict
from gymbench.jsonio import AtomicFile, read_capped, refuse_irregular_file, special_file
from gymbench.record import ResultsRecord, file_stamp, load_record

LATEST = "latest"


@dataclass(frozen=True)
class StoredRun:
    """One saved record, known by its path before it is read."""

    path: Path

    @property
    def machine_key(self) -> str:
        return self.path.parent.name

    @property
    def stamp(self) -> str:
        return self.path.stem.split("_", 1)[0]

    @property
    def name(self) -> str:
        return self.path.stem.split("_", 1)[-1]

    @cached_property
    def record(self) -> ResultsRecord:
        return load_record(self.path)

    @property
    def commit(self) -> str | None:
        return self.record.fingerprint.get("commit", {}).get("id")


@dataclass(frozen=True)
class Selection:
    """The records a spec chose, a label for reports, and warnings to show (machine mismatch)."""

    records: list[ResultsRecord]
    label: str
    paths: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class BaselineStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def runs(self, machine_key: str | None = None) -> list[StoredRun]:
        """Saved runs, oldest first (the file name starts with its UTC time)."""
        pattern = f"{machine_key or '*'}/*_*.json"
        found = _listed(self.root, pattern, "the saved runs")
        runs = [StoredRun(p) for p in found if p.is_file() and not p.name.startswith(".")]
        return sorted(runs, key=lambda run: (run.stamp, run.name))

    def select(self, spec: str, machine_key: str, cwd: Path | None = None) -> Selection:
        """Resolve ``spec`` (path, ``latest``, name, name glob or git ref) to records."""
        path = Path(spec)
        if path.suffix == ".json" or is_file_spec(path) or special_file(path):
            return self._from_file(path, machine_key)  # a FIFO, socket or device: refused there, in one line
        runs = self._matching(spec, machine_key, cwd)
        if not runs:
            raise GymbenchError(self._nothing_found(spec))
        chosen = [run.record for run in runs]
        label = spec if len(runs) > 1 else f"{runs[0].name} ({runs[0].stamp})"
        return Selection(chosen, label, [run.path for run in runs], machine_warnings(chosen, machine_key, label))

    def _from_file(self, path: Path, machine_key: str) -> Selection:
        from gymbench.gate.pytest_benchmark import load_any

        record = load_any(path)
        return Selection([record], path.name, [path], machine_warnings([record], machine_key, path.name))

    def _matching(self, spec: str, machine_key: str, cwd: Path | None) -> list[StoredRun]:
        """This machine's runs first; another machine's only when this one has none."""
        for key in (machine_key, None):
            runs = self.runs(key)
            if spec == LATEST:
                found = runs[-1:]
            elif any(ch in spec for ch in "*?["):
                found = [run for run in runs if fnmatch.fnmatchcase(run.name, spec)]
            else:
                found = [run for run in runs if run.name == spec][-1:] or self._by_commit(runs, spec, cwd)
            if found:
                return found
        return []

    def _by_commit(self, runs: list[StoredRun], ref: str, cwd: Path | None) -> list[StoredRun]:
        commit = resolve_git_ref(ref, cwd)
        if commit is None:
            return []
        return [run for run in runs if run.commit == commit]

    def _nothing_found(self, spec: str) -> str:
        names = sorted({run.name for run in self.runs()})
        known = printable(", ".join(names[-10:])) if names else "none yet"  # file names may hold anything
        here = f" ({spec} here is a directory; name a results file in it)" if _is_dir(spec) else ""
        return (
            f"no baseline {spec!r} in {self.root}/{here}: it is not a results file, a saved run name, "
            f"a glob over names or a git ref with saved runs. Saved names: {known}. Save one with "
            "`pytest benches/ --gymbench-save NAME`, or list them with `gymbench baselines`."
        )


def resolve_git_ref(ref: str, cwd: Path | None) -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, ValueError, subprocess.TimeoutExpired):  # ValueError: a NUL in the ref
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def is_file_spec(path: str | Path) -> bool:
    """False for a spec that cannot be a path at all (too long, a NUL byte): it is a name then."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def _is_dir(spec: str) -> bool:
    try:
        return bool(spec) and Path(spec).is_dir()
    except (OSError, ValueError):
        return False


def machine_warnings(records: Sequence[ResultsRecord], machine_key: str, label: str = "baseline") -> list[str]:
    """Warn (never stop) when a side of the comparison (named by ``label``) was measured elsewhere."""
    warnings = []
    for key in sorted({r.fingerprint.get("machine", {}).get("key", "?") for r in records} - {machine_key}):
        cpu = next(
            r.fingerprint["machine"].get("cpu_model", "?")
            for r in records
            if r.fingerprint.get("machine", {}).get("key", "?") == key
        )
        warnings.append(
            f"{label} was measured on machine {key} ({cpu}), not this one ({machine_key}); "
            "its figures may differ for reasons other than the code. Save a baseline on this machine "
            "to compare like with like."
        )
    return warnings


def save_json(data: Mapping[str, object], path: Path) -> Path:
    try:
        with AtomicFile(path, text=True, then="; choose another --results-dir") as target:
            target.write(json.dumps(data, indent=1) + "\n")
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise GymbenchError(f"{path}: cannot write ({reason}); check --results-dir") from None
    return path


def read_json(path: Path, what: str) -> dict[str, object]:
    """A calibration file's JSON: a regular file only (a FIFO as ``--calibration`` blocked forever),
    and no larger than any JSON file gymbench reads."""
    refuse_irregular_file(path, what)
    try:
        data = json.loads(read_capped(path, what).decode("utf-8"))
    except GymbenchError as exc:  # far too large
        raise ResultsFileError(str(exc)) from None
    except FileNotFoundError:
        raise ResultsFileError(f"{path}: no such {what} file") from None
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8, not JSON, a number too long
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).splitlines()[0]
        raise ResultsFileError(f"{path}: cannot read {what} file ({reason}); delete it and create it again") from None
    if not isinstance(data, dict):
        raise ResultsFileError(f"{path}: a {what} file must hold a JSON object")
    return data


CALIBRATION_DIR = "calibration"
AB_CALIBRATION_DIR = "calibration-ab"
"""Interleaved A/B noise is of another kind (paired rounds, not stored runs): kept apart."""


def save_calibration(
    table: NoiseTable, root: Path, name: str, created_at: str, directory: str = CALIBRATION_DIR
) -> Path:
    check_save_name(name)
    path = root / table.machine_key / directory / f"{file_stamp(created_at)}_{name}.json"
    return save_json(noise_to_dict(table, created_at), path)


def check_save_name(name: str, flag: str = "--name") -> None:
    """A calibration's name becomes part of a file name: the rule of every record name (``+run_name``)."""
    from gymbench.settings import safe_name

    try:
        safe_name("run_name", name)
    except GymbenchError:
        raise GymbenchError(
            f"{flag} {name!r}: use up to 101 letters, digits, '.', '_' or '-', starting with a letter or "
            "digit (the name becomes part of a file name)"
        ) from None


def load_calibration(path: Path) -> NoiseTable:
    return noise_from_dict(read_json(path, "calibration"), str(path))


def latest_calibration(root: Path, machine_key: str, directory: str = CALIBRATION_DIR) -> NoiseTable | None:
    """This machine's newest calibration, or ``None`` when it was never calibrated."""
    found = sorted(_listed(root, f"{machine_key}/{directory}/*_*.json", "its calibrations"))
    return load_calibration(found[-1]) if found else None


def _listed(root: Path, pattern: str, what: str) -> list[Path]:
    """``root.glob(pattern)``, or one line when the folder cannot be listed (a name too long for
    this file system)."""
    try:
        return list(root.glob(pattern))
    except OSError as exc:
        reason = exc.strerror or exc
        raise GymbenchError(f"{root}: cannot list {what} ({reason}); choose another +results_dir") from None
