from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import pytest

from gymbench import (
    BenchmarkResult,
    Metric,
    ResultsFileError,
    ResultsRecord,
    load_record,
    save_record,
)
from gymbench.fingerprint import collect_fingerprint
from gymbench.record import benchmark_id, results_schema


@pytest.fixture(scope="module")
def fingerprint() -> dict:
    return collect_fingerprint()


def make_record(fingerprint: dict) -> ResultsRecord:
    return ResultsRecord(
        name="unit",
        fingerprint=fingerprint,
        benchmarks=[
            BenchmarkResult(
                name="benches/x.py::test_a",
                params={"n": 4, "mode": "fast"},
                metrics={
                    "time": Metric.from_samples([0.3, 0.1, 0.2], "s", "lower"),
                    "throughput": Metric(value=12.5, unit="rollouts/s", direction="higher"),
                },
                group="g",
                options={"min_effect": 0.1},
            )
        ],
    )


def test_round_trip_keeps_everything(tmp_path: Path, fingerprint: dict) -> None:
    record = make_record(fingerprint)
    path = save_record(record, tmp_path / "sub" / "r.json")
    loaded = load_record(path)
    assert loaded == ResultsRecord.from_dict(record.to_dict())
    bench = loaded.benchmark("benches/x.py::test_a[mode=fast,n=4]")
    assert bench.metrics["time"].value == 0.2
    assert bench.metrics["time"].samples == (0.3, 0.1, 0.2)
    assert bench.metrics["throughput"].direction == "higher"
    assert bench.options == {"min_effect": 0.1}


def test_saved_file_is_valid_against_the_published_schema(tmp_path: Path, fingerprint: dict) -> None:
    path = save_record(make_record(fingerprint), tmp_path / "r.json")
    jsonschema.Draft202012Validator(results_schema()).validate(json.loads(path.read_text()))


def test_non_finite_values_survive_as_nan(tmp_path: Path, fingerprint: dict) -> None:
    record = ResultsRecord(
        name="nan",
        fingerprint=fingerprint,
        benchmarks=[BenchmarkResult("b", metrics={"m": Metric(math.inf, "s", "lower", (math.nan,))})],
    )
    loaded = load_record(save_record(record, tmp_path / "r.json"))
    assert math.isnan(loaded.benchmarks[0].metrics["m"].value)


def test_benchmark_id_is_name_plus_sorted_params() -> None:
    assert benchmark_id("t", {}) == "t"
    assert benchmark_id("t", {"b": 2, "a": "x"}) == "t[a=x,b=2]"


def test_corrupt_file_names_file_and_position(tmp_path: Path, fingerprint: dict) -> None:
    path = save_record(make_record(fingerprint), tmp_path / "r.json")
    path.write_text(path.read_text()[:200])
    with pytest.raises(ResultsFileError) as info:
        load_record(path)
    assert str(path) in str(info.value)
    assert "corrupt" in str(info.value)


def test_unknown_schema_version_is_refused(tmp_path: Path, fingerprint: dict) -> None:
    data = make_record(fingerprint).to_dict()
    data["schema_version"] = 99
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsFileError, match=r"future.json: results schema version 99"):
        load_record(path)


def test_foreign_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"benchmarks": []}')
    with pytest.raises(ResultsFileError, match="not a gymbench results file"):
        load_record(path)


def test_schema_violation_points_at_the_field(tmp_path: Path, fingerprint: dict) -> None:
    data = make_record(fingerprint).to_dict()
    data["benchmarks"][0]["metrics"]["time"]["direction"] = "sideways"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(
        ResultsFileError, match=r"bad.json: invalid results file at benchmarks/0/metrics/time/direction"
    ):
        load_record(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ResultsFileError, match="no such results file"):
        load_record(tmp_path / "absent.json")


def test_metric_needs_samples_and_a_direction() -> None:
    with pytest.raises(ValueError):
        Metric.from_samples([], "s", "lower")


def test_a_benchmark_listed_twice_is_refused_where_the_record_is_read(tmp_path: Path, fingerprint: dict) -> None:
    """A comparison read one or the other of the two entries and passed silently."""
    data = make_record(fingerprint).to_dict()
    data["benchmarks"].append(data["benchmarks"][0])
    path = tmp_path / "twice.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsFileError, match=r"twice.json: benchmark '.*test_a\[mode=fast,n=4\]' is listed twice "
                                               r"\(entries 1 and 2\)"):  # fmt: skip
        load_record(path)
