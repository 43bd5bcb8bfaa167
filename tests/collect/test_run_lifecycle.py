"""Every command goes through one run lifecycle: announced, fingerprinted by plugins, saved, announced."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gymbench import GymbenchError, ResultsRecord, RunInfo, hookimpl, load_record
from gymbench.cli import main
from gymbench.collect.command import run_collect
from gymbench.collect.config import CollectConfig
from gymbench.settings import build_settings
from gymbench.testing import make_plugins
from gymbench.tune.command import run_diagnose, run_tune
from gymbench.tune.config import DiagnoseConfig, TuneConfig

from .test_collect_cli import EXAMPLES, FAST_SIM

SMALL_PROBES = ["sample_size=16", "min_batches=2", "max_batches=3", "progress=false"]
SMALL_PROBES += [s.lstrip("+") for s in FAST_SIM]


class Watcher:
    """A plugin that sees every run: the events, and its own fingerprint entry."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    @hookimpl
    def gymbench_run_start(self, run: RunInfo) -> None:
        self.events.append(("start", run.kind))

    @hookimpl
    def gymbench_run_finish(self, run: RunInfo, record: ResultsRecord) -> None:
        self.events.append(("finish", record.kind))

    @hookimpl
    def gymbench_update_fingerprint(self, fingerprint: dict[str, dict[str, Any]]) -> None:
        fingerprint["machine"]["cluster"] = "test-cluster"


@pytest.mark.parametrize("kind", ["collect", "tune", "diagnose"])
def test_collect_tune_and_diagnose_fire_the_events_and_carry_the_plugin_fingerprint(tmp_path: Path, kind: str) -> None:
    watcher = Watcher()
    common = [f"input_jsonl_fpath={EXAMPLES}", f"results_dir={tmp_path}"]
    if kind == "collect":
        config = build_settings(CollectConfig, [*common, f"output_jsonl_fpath={tmp_path / 'o.jsonl'}", "limit=4",
                                                "progress=false", *(s.lstrip("+") for s in FAST_SIM)])  # fmt: skip
        assert run_collect(config, make_plugins(watcher)) == 0
    elif kind == "tune":
        config = build_settings(TuneConfig, [*common, "start=2", "max_parallelism=4", "plot=",
                                             *SMALL_PROBES])  # fmt: skip
        assert run_tune(config, make_plugins(watcher)) == 0
    else:
        config = build_settings(DiagnoseConfig, [*common, "low=1", "high=2", *SMALL_PROBES])
        assert run_diagnose(config, make_plugins(watcher)) == 0
    assert watcher.events == [("start", kind), ("finish", kind)]
    [saved] = tmp_path.glob(f"*/*_{kind}.json")
    record = load_record(saved)
    assert record.kind == kind and record.fingerprint["machine"]["cluster"] == "test-cluster"


def test_train_fires_the_events_and_carries_the_plugin_fingerprint(tmp_path: Path) -> None:
    from gymbench.train.command import run_train
    from gymbench.train.settings import TrainSettings

    watcher = Watcher()
    words = ["model=mlp", "size=tiny", "batch=4", "steps=1", "warmup=0", "memory=false", "progress=false", "save=t"]
    settings = build_settings(TrainSettings, [*words, f"results_dir={tmp_path}"])
    assert run_train(settings, make_plugins(watcher)) == 0
    assert watcher.events == [("start", "train"), ("finish", "train")]
    assert load_record(next(tmp_path.glob("*/*_t.json"))).fingerprint["machine"]["cluster"] == "test-cluster"


def test_tune_sweeps_through_the_registry_so_a_blocked_strategy_is_honoured(tmp_path: Path) -> None:
    config = build_settings(TuneConfig, [f"input_jsonl_fpath={EXAMPLES}", "method=adaptive", "save_results=false",
                                         "plot=", *SMALL_PROBES])  # fmt: skip
    with pytest.raises(GymbenchError, match="unknown strategy 'adaptive'"):
        run_tune(config, make_plugins(blocked=["strategy:adaptive"]))


def test_a_strategy_without_a_parallelism_cannot_be_swept() -> None:
    config = build_settings(TuneConfig, [f"input_jsonl_fpath={EXAMPLES}", "strategy=adaptive", "save_results=false",
                                         "plot=", *SMALL_PROBES])  # fmt: skip
    with pytest.raises(GymbenchError, match="has no num_samples_in_parallel setting"):
        run_tune(config, make_plugins())


def help_text(command: str) -> str:
    done = subprocess.run([sys.executable, "-m", "gymbench.cli", command, "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def flags(text: str) -> set[str]:
    return set(re.findall(r"(--[a-z][a-z0-9-]+)", text))


def test_each_commands_help_lists_only_settings_that_apply() -> None:
    collect, tune, diagnose = flags(help_text("collect")), flags(help_text("tune")), flags(help_text("diagnose"))
    assert {"--output-jsonl-fpath", "--resume", "--num-repeats"} <= collect
    assert not {"--method", "--low", "--sample-size"} & collect
    assert {"--method", "--start", "--stability-rollouts", "--sample-size"} <= tune
    assert not {"--low", "--high", "--output-jsonl-fpath", "--resume"} & tune
    assert {"--low", "--high", "--sample-size"} <= diagnose
    assert not {"--method", "--start", "--plot", "--output-jsonl-fpath"} & diagnose


def test_sim_server_help_does_not_crash_on_percent_signs() -> None:
    text = help_text("sim-server")
    assert re.search(r"5%\s+server\s+errors", text) and "--max-num-seqs" in text


def test_unknown_command_words_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["show", "a.json", "extra=1"])
    assert "unrecognized arguments: extra=1" in capsys.readouterr().err
