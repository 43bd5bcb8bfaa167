"""The results record: the one data type every benchmark produces and every later piece reads.

A record is saved as schema-versioned JSON (``schema/results-v1.schema.json``, documented in
``docs/results-schema.md``). Loading checks the file against the schema so that a corrupt or
foreign file fails with a message naming the file, not somewhere deep in a comparison.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from gymbench.errors import GymbenchError, ResultsFileError
from gymbench.jsonio import AtomicFile, JSONReadError, loads, read_capped, refuse_irregular_file, write_json_atomic
from gymbench.types import Direction, JSONObject, JSONValue

SCHEMA_ID = "gymbench.results"
SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = (1,)
MOST_RECORDS_PER_SECOND = 9999
"""Records of one name in one second of one machine's store (the counter in the name has 4 digits)."""


@dataclass(frozen=True)
class Metric:
    """One measured quantity. ``value`` is the summary (the median of ``samples`` when given)."""

    value: float
    unit: str
    direction: Direction
    samples: tuple[float, ...] = ()

    @classmethod
    def from_samples(cls, samples: Iterable[float], unit: str, direction: Direction) -> Metric:
        data = tuple(float(x) for x in samples)
        if not data:
            raise ValueError("a metric needs at least one sample")
        return cls(value=float(statistics.median(data)), unit=unit, direction=direction, samples=data)

    def to_dict(self) -> JSONObject:
        return {
            "value": _finite_or_none(self.value),
            "unit": self.unit,
            "direction": self.direction,
            "samples": [_finite_or_none(x) for x in self.samples],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Metric:
        return cls(
            value=_none_to_nan(data["value"]),
            unit=data["unit"],
            direction=data["direction"],
            samples=tuple(_none_to_nan(x) for x in data.get("samples", ())),
        )


def benchmark_id(name: str, params: Mapping[str, Any]) -> str:
    """The stable id of a benchmark case: its name plus its parameters in pytest's style."""
    if not params:
        return name
    inside = ",".join(f"{key}={params[key]}" for key in sorted(params))
    return f"{name}[{inside}]"


@dataclass(frozen=True)
class BenchmarkResult:
    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, Metric] = field(default_factory=dict)
    group: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    """Per-benchmark settings such as a minimum effect that matters (from the pytest marker)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Free-form context (configuration, notes); not compared."""

    @property
    def id(self) -> str:
        return benchmark_id(self.name, self.params)

    def to_dict(self) -> JSONObject:
        return {
            "id": self.id,
            "name": self.name,
            "params": _jsonable(self.params),
            "group": self.group,
            "metrics": {key: metric.to_dict() for key, metric in self.metrics.items()},
            "options": _jsonable(self.options),
            "extra": _jsonable(self.extra),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchmarkResult:
        return cls(
            name=data["name"],
            params=data.get("params", {}),
            metrics={k: Metric.from_dict(v) for k, v in data["metrics"].items()},
            group=data.get("group"),
            options=data.get("options", {}),
            extra=data.get("extra", {}),
        )


@dataclass(frozen=True)
class ResultsRecord:
    """Everything one run measured, with the fingerprint of where and on what it ran."""

    name: str
    benchmarks: Sequence[BenchmarkResult]
    fingerprint: Mapping[str, Mapping[str, Any]]
    created_at: str = field(default_factory=lambda: utc_now())
    kind: str = "pytest"

    def to_dict(self) -> JSONObject:
        return {
            "schema": SCHEMA_ID,
            "schema_version": SCHEMA_VERSION,
            "name": self.name,
            "kind": self.kind,
            "created_at": self.created_at,
            "fingerprint": _jsonable(self.fingerprint),
            "benchmarks": [bench.to_dict() for bench in self.benchmarks],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResultsRecord:
        return cls(
            name=data["name"],
            kind=data.get("kind", "pytest"),
            created_at=data["created_at"],
            fingerprint=data["fingerprint"],
            benchmarks=[BenchmarkResult.from_dict(b) for b in data["benchmarks"]],
        )

    def benchmark(self, bench_id: str) -> BenchmarkResult:
        for bench in self.benchmarks:
            if bench.id == bench_id:
                return bench
        raise KeyError(bench_id)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@lru_cache(maxsize=1)
def results_schema() -> JSONObject:
    text = resources.files("gymbench").joinpath("schema/results-v1.schema.json").read_text()
    return json.loads(text)


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema  # imported here: the pytest plugin loads this module in every pytest run

    return jsonschema.Draft202012Validator(results_schema())


def validate_record_dict(data: Any, source: str = "<record>") -> None:
    """Raise :class:`ResultsFileError` naming ``source`` when ``data`` is not a valid record."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA_ID:
        raise ResultsFileError(
            f"{source}: not a gymbench results file (expected a JSON object with "
            f'"schema": "{SCHEMA_ID}"). Point gymbench at a file written by gymbench.'
        )
    version = data.get("schema_version")
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise ResultsFileError(
            f"{source}: results schema version {version!r} is not supported by this gymbench "
            f"(it reads versions {list(SUPPORTED_SCHEMA_VERSIONS)}). Upgrade gymbench to read it, "
            "or re-run the benchmark to write it in the current schema."
        )
    from jsonschema.exceptions import best_match

    try:
        error = best_match(_validator().iter_errors(data))
    except RecursionError:
        raise ResultsFileError(f"{source}: results file nested too deeply to be a gymbench record") from None
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(top level)"
        raise ResultsFileError(
            f"{source}: invalid results file at {where}: {error.message}. "
            "The file was edited by hand or written by a broken tool; re-run the benchmark."
        )


def save_record(record: ResultsRecord, path: str | os.PathLike[str]) -> Path:
    """Validate, then write atomically: a run killed mid-save never leaves half a file."""
    data = record.to_dict()
    validate_record_dict(data, str(path))
    return write_json_atomic(path, data)


def file_stamp(created_at: str) -> str:
    """``2026-11-22T07:39:55+00:00`` → ``20261122T073955``: file names in the store sort by time."""
    return created_at.replace(":", "").replace("-", "").split("+")[0].split(".")[0]


def store_path(record: ResultsRecord, results_dir: str | os.PathLike[str], name: str | None = None) -> Path:
    """Where the store keeps a record: ``<results_dir>/<machine key>/<stamp>_<name>.json``."""
    key = record.fingerprint["machine"]["key"]
    return Path(results_dir) / str(key) / f"{file_stamp(record.created_at)}_{name or record.name}.json"


def store_names(record: ResultsRecord, results_dir: str | os.PathLike[str], name: str | None = None) -> Iterator[Path]:
    """The names a record may take in the store, in order: :func:`store_path`, then the same with a
    counter after the stamp (``<stamp>-0002_<name>.json``...), which sorts after it, for runs of one
    name saved in the same second (manual splits launched together)."""
    first = store_path(record, results_dir, name)
    yield first
    stamp, rest = first.name.split("_", 1)
    for number in range(2, MOST_RECORDS_PER_SECOND + 1):
        yield first.with_name(f"{stamp}-{number:04d}_{rest}")


def save_to_store(record: ResultsRecord, results_dir: str | os.PathLike[str], name: str | None = None) -> Path:
    """Validate, then write under a name no other record has: a record already there is never replaced."""
    data = record.to_dict()
    first = store_path(record, results_dir, name)
    validate_record_dict(data, str(first))
    target = AtomicFile(first, text=True, then="; choose another results_dir")
    target.write(json.dumps(data, indent=1, allow_nan=False, ensure_ascii=False) + "\n")
    return target.commit_new(store_names(record, results_dir, name))


def read_results_json(path: str | os.PathLike[str], what: str = "results", *, allow_nan: bool = False) -> JSONValue:
    """A results file's JSON (a gymbench record, a pytest-benchmark file); any problem names the file.
    Only a regular file is opened (:func:`refuse_irregular_file`), and at most ``MAX_JSON_FILE_BYTES``."""
    source = Path(path)
    refuse_irregular_file(source, what)
    try:
        raw = read_capped(source, what)
    except GymbenchError as exc:  # a device, or far too large
        raise ResultsFileError(str(exc)) from None
    except FileNotFoundError:
        raise ResultsFileError(f"{source}: no such {what} file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise ResultsFileError(f"{source}: cannot read {what} file: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return loads(raw, allow_nan=allow_nan)
    except JSONReadError as exc:
        where = f"{source}:{exc.line}:{exc.column}" if exc.line is not None else str(source)
        raise ResultsFileError(
            f"{where}: corrupt {what} file ({exc}). It may have been truncated by a crash or "
            "edited by hand; re-run the benchmark to replace it."
        ) from None


def record_from_data(data: Any, source: str) -> ResultsRecord:
    """A record from a results file's JSON, checked against the schema first."""
    validate_record_dict(data, source)
    try:
        record = ResultsRecord.from_dict(data)
    except (KeyError, TypeError, ValueError, ArithmeticError, RecursionError) as exc:
        # ArithmeticError: an integer too large for a float, in a metric
        raise ResultsFileError(f"{source}: invalid results file ({type(exc).__name__}: {exc})") from None
    refuse_repeated_benchmarks(record, source)
    return record


def refuse_repeated_benchmarks(record: ResultsRecord, source: str) -> None:
    """A benchmark listed twice (an edit, a concatenation) is read as one or the other depending on
    the reader: a comparison passed silently on whichever it met. Checked where a record (or a
    pytest-benchmark file) is read, not where one is saved, so a session's results are never lost to it."""
    seen: dict[str, int] = {}
    for index, bench in enumerate(record.benchmarks):
        if bench.id in seen:
            raise ResultsFileError(
                f"{source}: benchmark {bench.id!r} is listed twice (entries {seen[bench.id] + 1} and {index + 1}); "
                "a record holds each benchmark once: keep one entry, or re-run and save the record again"
            )
        seen[bench.id] = index


def load_record(path: str | os.PathLike[str]) -> ResultsRecord:
    return record_from_data(read_results_json(path), str(path))


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _none_to_nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _jsonable(value: Any) -> JSONValue:
    """Parameters may be arbitrary objects (pytest ids); keep JSON types, stringify the rest."""
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, float):
        return _finite_or_none(value)
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)
