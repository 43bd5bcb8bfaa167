"""Tuning and diagnosis against simulator settings whose limits are known exactly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gymbench.settings import build_settings
from gymbench.testing import make_plugins
from gymbench.tune.command import diagnose_run, tune_run
from gymbench.tune.config import DiagnoseConfig, TuneConfig

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "gymbench" / "data" / "example_tasks.jsonl"
CODE_TASKS = ROOT / "gymbench" / "data" / "example_code_tasks.jsonl"
# A small engine that saturates at 16 sequences, with 0.1-0.2 s requests: probes take seconds.
KNEE16 = {"max_num_seqs": 16, "step_base_s": 0.01, "step_per_seq_s": 0.0005, "output_tokens_mean": 8}


def config(*settings: str, sim: dict | None = None, tasks: Path = TASKS, schema: type = TuneConfig) -> Any:
    sim_settings = [f"sim.{key}={value}" for key, value in (sim or {}).items()]
    base = [f"input_jsonl_fpath={tasks}", "save_results=false", "max_batches=8", "progress=false"]
    if schema is TuneConfig:
        base.append("plot=")
    return build_settings(schema, [*base, *sim_settings, *(s.removeprefix("+") for s in settings)])


def verdict(*settings: str, sim: dict | None = None, tasks: Path = TASKS) -> str:
    diagnosis = diagnose_run(config(*settings, sim=sim, tasks=tasks, schema=DiagnoseConfig), make_plugins())
    return diagnosis.verdict


def test_a_tiny_connection_pool_is_the_connection_pool() -> None:
    settings = ("low=4", "high=16", "global_aiohttp_connector_limit=2")
    assert verdict(*settings, sim={**KNEE16, "max_num_seqs": 256}) == "connection pool"


def test_slow_verification_is_verification() -> None:
    settings = ("low=16", "high=64", "verifier=code", "verifier_workers=1")
    fast = {**KNEE16, "max_num_seqs": 256, "step_base_s": 0.002, "seed": 4}
    diagnosis = diagnose_run(config(*settings, sim=fast, tasks=CODE_TASKS, schema=DiagnoseConfig), make_plugins())
    assert diagnosis.verdict == "verification", diagnosis.evidence  # the evidence says why, if it ever is not


@pytest.mark.slow
def test_a_zero_latency_server_at_high_parallelism_is_the_client() -> None:
    settings = ("low=64", "high=256", "sim_preset=zero-latency", "min_batches=6")
    assert verdict(*settings) == "client"


def test_cli_writes_table_plot_and_record(tmp_path: Path) -> None:
    plot = tmp_path / "tune.png"
    done = subprocess.run(
        [sys.executable, "-m", "gymbench.cli", "tune", f"+input_jsonl_fpath={TASKS}", "+start=4", "+max_batches=8",
         f"+plot={plot}", f"+results_dir={tmp_path / 'results'}",
         *[f"+sim.{k}={v}" for k, v in KNEE16.items()]],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "| parallelism | rollouts/s |" in done.stdout and "recommended num_samples_in_parallel=" in done.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list((tmp_path / "results").glob("*/*_tune.json"))
    diagnosed = subprocess.run(
        [sys.executable, "-m", "gymbench.cli", "diagnose", f"+input_jsonl_fpath={TASKS}", "+low=2", "+high=8",
         f"+results_dir={tmp_path / 'results'}",
         "+max_batches=8", *[f"+sim.{k}={v}" for k, v in KNEE16.items()]],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert diagnosed.returncode == 0, diagnosed.stderr
    assert "verdict: " in diagnosed.stdout and "next step:" in diagnosed.stdout


def test_stability_validation_at_the_recommendation() -> None:
    result = tune_run(config("start=4", "stability_rollouts=150", sim=KNEE16), make_plugins())
    stability = result.stability
    assert stability is not None and stability.parallelism == result.recommended
    assert stability.rollouts >= 150 and stability.error_rate == 0.0
