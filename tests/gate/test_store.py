"""Choosing a baseline from the store, and clear errors for bad ones."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gymbench.errors import GymbenchError, ResultsFileError
from gymbench.gate.noise import MetricNoise, NoiseTable
from gymbench.gate.store import BaselineStore, latest_calibration, load_calibration, save_calibration
from tests.gate.synthetic import save_run, suite

HERE = "machine0000a"


@pytest.fixture
def store(tmp_path: Path) -> BaselineStore:
    save_run(tmp_path, suite(1, name="main"), "20260101T000000")
    save_run(tmp_path, suite(2, name="main"), "20260102T000000")
    save_run(tmp_path, suite(3, name="aa-000"), "20260103T000000")
    save_run(tmp_path, suite(4, name="aa-001"), "20260104T000000")
    save_run(tmp_path, suite(5, name="elsewhere", key="othermachine"), "20260105T000000")
    return BaselineStore(tmp_path)


def test_latest_on_this_machine(store: BaselineStore) -> None:
    chosen = store.select("latest", HERE)
    assert chosen.paths[0].name == "20260104T000000_aa-001.json" and not chosen.warnings


def test_a_name_picks_its_latest_run_and_a_glob_picks_all(store: BaselineStore) -> None:
    assert store.select("main", HERE).paths[0].name.startswith("20260102")
    assert [p.name[:8] for p in store.select("aa-*", HERE).paths] == ["20260103", "20260104"]


def test_another_machine_warns_and_proceeds(store: BaselineStore) -> None:
    chosen = store.select("elsewhere", HERE)
    assert len(chosen.records) == 1
    assert "othermachine" in chosen.warnings[0] and "not this one" in chosen.warnings[0]


def test_a_git_ref_selects_the_runs_of_its_commit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run([*git, "tag", "v1"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    save_run(tmp_path / "results", suite(1, name="ci", commit=head), "20260101T000000")
    save_run(tmp_path / "results", suite(2, name="ci2", commit="f" * 40), "20260102T000000")
    chosen = BaselineStore(tmp_path / "results").select("v1", HERE, cwd=repo)
    assert [r.fingerprint["commit"]["id"] for r in chosen.records] == [head]


def test_unknown_baseline_names_the_store_and_what_exists(store: BaselineStore) -> None:
    with pytest.raises(GymbenchError, match=r"no baseline 'nope'.*Saved names: aa-000, aa-001, elsewhere, main"):
        store.select("nope", HERE)


def test_corrupt_baseline_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / HERE / "20260101T000000_broken.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": "gymbench.results", "schema_ver')
    with pytest.raises(ResultsFileError, match=r"20260101T000000_broken.json:1:\d+: corrupt results file"):
        BaselineStore(tmp_path).select("broken", HERE)
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"hello": 1}))
    with pytest.raises(
        ResultsFileError,
        match=r"foreign.json: neither a gymbench results file .* nor a pytest-benchmark JSON",
    ):
        BaselineStore(tmp_path).select(str(foreign), HERE)


def test_calibration_round_trip_and_corruption(tmp_path: Path) -> None:
    table = NoiseTable(HERE, {"b": {"time": MetricNoise(0.05, 0.01, 7)}})
    path = save_calibration(table, tmp_path, "cal", "2026-01-01T00:00:00+00:00")
    assert path.parent == tmp_path / HERE / "calibration"
    loaded = latest_calibration(tmp_path, HERE)
    assert loaded is not None and loaded.get("b", "time") == MetricNoise(0.05, 0.01, 7)
    assert latest_calibration(tmp_path, "never") is None
    path.write_text(json.dumps({"schema": "gymbench.calibration", "schema_version": 1, "machine_key": HERE}))
    with pytest.raises(ResultsFileError, match="corrupt calibration file.*gymbench calibrate"):
        load_calibration(path)
    path.write_text("[1, 2")
    with pytest.raises(ResultsFileError, match="cannot read calibration file"):
        load_calibration(path)
