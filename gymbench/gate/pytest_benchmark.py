"""Interop with pytest-benchmark's JSON (``--benchmark-json``, ``--benchmark-autosave``).

Importing lets a suite built on pytest-benchmark's ``benchmark`` fixture use gymbench's gate:
``benchmarks[].stats.data`` (saved with ``--benchmark-save-data``) become the samples of a
``time`` metric. Without ``data`` only the median is known; such metrics compare as single
values (inconclusive beyond the threshold unless calibration knows their noise). Exporting
writes gymbench results in pytest-benchmark's format, with its own ``Stats`` doing the sums, so
``pytest-benchmark compare`` and friends read them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from gymbench.errors import ResultsFileError
from gymbench.fingerprint import machine_info, machine_key
from gymbench.record import (
    SCHEMA_ID,
    BenchmarkResult,
    Metric,
    ResultsRecord,
    load_record,
    read_results_json,
    refuse_repeated_benchmarks,
)
from gymbench.types import JSONObject, JSONValue

EXTRA_KEY = "pytest_benchmark"
PASSTHROUGH = ("name", "fullname", "param", "group", "options", "extra_info")


def is_pytest_benchmark(data: Any) -> bool:
    return isinstance(data, dict) and "machine_info" in data and isinstance(data.get("benchmarks"), list)


def load_any(path: Path) -> ResultsRecord:
    """A gymbench record or a pytest-benchmark JSON file, told apart by content."""
    data = read_results_json(path, allow_nan=True)  # pytest-benchmark's writer allows NaN; gymbench's does not
    if isinstance(data, dict) and data.get("schema") == SCHEMA_ID:
        return load_record(path)  # read again, strictly
    if is_pytest_benchmark(data):
        return record_from_pytest_benchmark(data, str(path))
    raise ResultsFileError(
        f'{path}: neither a gymbench results file ("schema": "{SCHEMA_ID}") nor a pytest-benchmark '
        'JSON file (with "machine_info" and "benchmarks"); point gymbench at one of those'
    )


def load_pytest_benchmark(path: Path) -> ResultsRecord:
    return record_from_pytest_benchmark(read_results_json(path, "pytest-benchmark JSON", allow_nan=True), str(path))


def record_from_pytest_benchmark(data: Any, source: str) -> ResultsRecord:
    if not is_pytest_benchmark(data):
        raise ResultsFileError(
            f'{source}: not a pytest-benchmark JSON file (expected "machine_info" and a "benchmarks" '
            "list, as written by --benchmark-json or --benchmark-autosave)"
        )
    benchmarks = []
    for index, entry in enumerate(data["benchmarks"]):
        try:
            benchmarks.append(_benchmark(entry))
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:  # ArithmeticError: a number too large
            reason = f"has no {exc}" if isinstance(exc, KeyError) else f"is malformed ({exc})"
            raise ResultsFileError(
                f"{source}: benchmarks[{index}] {reason}; expected benchmarks[].fullname and "
                "benchmarks[].stats.median (or .data) as pytest-benchmark writes them"
            ) from None
    record = ResultsRecord(
        name=Path(source).stem,
        benchmarks=benchmarks,
        fingerprint=_fingerprint(data, source),
        created_at=str(data.get("datetime") or "1970-01-01T00:00:00+00:00"),
        kind="pytest-benchmark",
    )
    refuse_repeated_benchmarks(record, source)  # compared silently on one of them; imported, unreadable
    return record


def _benchmark(entry: Mapping[str, Any]) -> BenchmarkResult:
    if not isinstance(entry, Mapping) or not isinstance(entry["stats"], Mapping):
        raise TypeError("each benchmark and its stats must be objects")
    stats = entry["stats"]
    data = stats.get("data")
    if data:
        metric = Metric.from_samples(data, unit="s", direction="lower")
    else:
        metric = Metric(value=float(stats["median"]), unit="s", direction="lower", samples=(float(stats["median"]),))
    if not all(math.isfinite(x) for x in metric.samples):
        raise ValueError("timings must be finite numbers")
    kept = {key: entry.get(key) for key in PASSTHROUGH}
    kept["iterations"] = stats.get("iterations", 1)
    if not data:
        kept["stats"] = {k: v for k, v in stats.items() if k != "data"}
    return BenchmarkResult(
        name=str(entry["fullname"]).split("[", 1)[0],
        params=dict(entry.get("params") or {}),
        metrics={"time": metric},
        group=entry.get("group"),
        extra={EXTRA_KEY: kept},
    )


def _section(data: Mapping[str, Any], key: str, source: str) -> Mapping[str, JSONValue]:
    """An optional object of the file (``machine_info``, ``commit_info``, ``machine_info.cpu``)."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ResultsFileError(f"{source}: {key} must be an object, got {type(value).__name__}")
    return value


def _fingerprint(data: Mapping[str, Any], source: str) -> dict[str, JSONObject]:
    info = _section(data, "machine_info", source)
    cpu = _section(info, "cpu", source)
    machine: dict[str, Any] = {
        "cpu_model": str(cpu.get("brand_raw") or info.get("processor") or "unknown"),
        "cpu_count_logical": cpu.get("count"),
        "memory_total_bytes": None,
        "system": info.get("system"),
        "release": info.get("release"),
        "arch": info.get("machine"),
        "hostname": info.get("node"),
        "gpus": [],
        "gpu_note": "unknown: imported from pytest-benchmark",
    }
    machine.update(_this_machine_if_same(machine))
    machine["key"] = machine_key(machine)
    commit = _section(data, "commit_info", source)
    commit_id = commit.get("id")
    return {
        "machine": machine,
        "software": {
            "python": str(info.get("python_version") or "unknown"),
            "gymbench": "imported",
            "packages": {"pytest-benchmark": data.get("version")},
        },
        "commit": {
            "id": None if commit_id in (None, "unversioned") else str(commit_id),
            "dirty": commit.get("dirty"),
            "branch": commit.get("branch"),
        },
    }


SAME_MACHINE_FIELDS = ("hostname", "cpu_model", "cpu_count_logical", "system", "arch")


def _this_machine_if_same(machine: Mapping[str, Any]) -> JSONObject:
    """This machine's memory and GPUs when the file was written here (same host name, CPU, OS).

    pytest-benchmark records neither (nor the CPU flags), so without them the file's key could never be this
    machine's, and its results would be filed and warned about as another machine's.
    """
    here = machine_info()
    if any(machine.get(name) != here.get(name) for name in SAME_MACHINE_FIELDS):
        return {}
    return {
        "memory_total_bytes": here["memory_total_bytes"],
        "cpu_flags": here["cpu_flags"],
        "gpus": here["gpus"],
        "gpu_note": f"{here['gpu_note']} (this machine: same host name, CPU and OS as the file's)",
    }


class PytestBenchmarkFile(TypedDict):
    """pytest-benchmark's ``--benchmark-json`` file, as :func:`to_pytest_benchmark` writes it."""

    machine_info: JSONObject
    commit_info: JSONObject
    benchmarks: list[JSONObject]
    datetime: str
    version: str


def to_pytest_benchmark(record: ResultsRecord, metric: str = "time") -> PytestBenchmarkFile:
    """pytest-benchmark's JSON for ``record``: each benchmark's ``metric`` becomes its timing."""
    from pytest_benchmark import __version__

    machine = record.fingerprint.get("machine", {})
    commit = record.fingerprint.get("commit", {})
    return {
        "machine_info": {
            "node": machine.get("hostname", ""),
            "processor": machine.get("cpu_model", ""),
            "machine": machine.get("arch", ""),
            "python_version": record.fingerprint.get("software", {}).get("python", ""),
            "release": machine.get("release", ""),
            "system": machine.get("system", ""),
            "cpu": {"brand_raw": machine.get("cpu_model", ""), "count": machine.get("cpu_count_logical")},
        },
        "commit_info": {"id": commit.get("id"), "dirty": commit.get("dirty"), "branch": commit.get("branch")},
        "benchmarks": [_export(b, metric) for b in record.benchmarks if _timings(b, metric)],
        "datetime": record.created_at,
        "version": __version__,
    }


def left_out(record: ResultsRecord, metric: str = "time") -> dict[str, list[str]]:
    """The benchmarks an export for ``metric`` leaves out, each with the metrics it does have."""
    return {b.id: sorted(b.metrics) for b in record.benchmarks if not _timings(b, metric)}


def _timings(bench: BenchmarkResult, metric: str) -> list[float]:
    """The metric's finite samples (its value when it has none): pytest-benchmark's statistics need some."""
    found = bench.metrics.get(metric)
    if found is None:
        return []
    finite = [x for x in found.samples if math.isfinite(x)]
    return finite or ([found.value] if math.isfinite(found.value) else [])


def _export(bench: BenchmarkResult, metric: str) -> JSONObject:
    from pytest_benchmark.stats import Stats

    kept = dict(bench.extra.get(EXTRA_KEY, {}))
    samples = _timings(bench, metric)
    if "stats" in kept:
        stats = dict(kept.pop("stats"))
    else:
        collected = Stats()
        for sample in samples:
            collected.update(sample)
        stats = {**collected.as_dict(), "data": list(samples), "iterations": kept.get("iterations", 1)}
    kept.pop("iterations", None)
    fullname = kept.get("fullname") or bench.id
    others = {name: m.value for name, m in bench.metrics.items() if name != metric}
    return {
        "group": kept.get("group", bench.group),
        "name": kept.get("name") or fullname.rsplit("::", 1)[-1],
        "fullname": fullname,
        "params": dict(bench.params) or None,
        "param": kept.get("param") or (bench.id.split("[", 1)[1][:-1] if "[" in bench.id else None),
        "extra_info": {**(kept.get("extra_info") or {}), **others},
        "options": kept.get("options") or {},
        "stats": stats,
    }
