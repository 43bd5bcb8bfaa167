"""Every command goes through one run lifecycle: announced, fingerprinted by plugins, saved, announced."""

from __future__ import annotations

import json
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
from gymbench.run import Run
from gymbench.settings import build_settings
from gymbench.testing import make_plugins
from gymbench.tune.command import run_diagnose, run_tune
from gymbench.tune.config import DiagnoseConfig, TuneConfig
from gymbench.types import Component

from .test_collect_cli import EXAMPLES, FAST_SIM

SMALL_PROBES = ["sample_size=16", "min_batches=2", "max_batches=3", "progress=false"]
SMALL_PROBES += [s.lstrip("+") for s in FAST_SIM]


class Watcher:
    """A plugin that sees every run: the events, and its own fingerprint entry."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.errors: list[BaseException | None] = []

    @hookimpl
    def gymbench_run_start(self, run: RunInfo) -> None:
        self.events.append(("start", run.kind))

    @hookimpl
    def gymbench_run_finish(self, run: RunInfo, record: ResultsRecord) -> None:
        self.events.append(("finish", record.kind))

    @hookimpl
    def gymbench_update_fingerprint(self, fingerprint: dict[str, dict[str, Any]]) -> None:
        fingerprint["machine"]["cluster"] = "test-cluster"


class ErrorWatcher:
    """A plugin that takes the finish hook's ``error`` too."""

    def __init__(self) -> None:
        self.finished: list[tuple[int, BaseException | None]] = []

    @hookimpl
    def gymbench_run_finish(self, record: ResultsRecord, error: BaseException | None) -> None:
        self.finished.append((len(record.benchmarks), error))


def saved_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("results record: ")]


@pytest.mark.parametrize("kind", ["collect", "tune", "diagnose"])
def test_collect_tune_and_diagnose_fire_the_events_and_carry_the_plugin_fingerprint(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
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
    assert saved_lines(capsys.readouterr().err) == [f"results record: {saved}"]


def test_train_fires_the_events_and_carries_the_plugin_fingerprint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gymbench.train.command import run_train
    from gymbench.train.settings import TrainSettings

    watcher = Watcher()
    words = ["model=mlp", "size=tiny", "batch=4", "steps=1", "warmup=0", "memory=false", "progress=false", "save=t"]
    settings = build_settings(TrainSettings, [*words, f"results_dir={tmp_path}"])
    assert run_train(settings, make_plugins(watcher)) == 0
    assert watcher.events == [("start", "train"), ("finish", "train")]
    [saved] = tmp_path.glob("*/*_t.json")
    assert load_record(saved).fingerprint["machine"]["cluster"] == "test-cluster"
    assert saved_lines(capsys.readouterr().err) == [f"results record: {saved}"]


def test_import_goes_through_the_run_and_says_where_it_saved_the_same_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gymbench.cli import build_parser
    from gymbench.gate.pytest_benchmark import to_pytest_benchmark
    from gymbench.record import BenchmarkResult, Metric
    from gymbench.report.store_commands import _run_import

    record = ResultsRecord("pb", [BenchmarkResult("case", {}, {"time": Metric.from_samples([1.0, 1.1], "s", "lower")})],
                           {}, kind="pytest")  # fmt: skip
    source = tmp_path / "pb.json"
    source.write_text(json.dumps(to_pytest_benchmark(record)))
    watcher, results = Watcher(), tmp_path / "results"
    argv = ["import", str(source), "--name", "pb", "--results-dir", str(results)]
    args = build_parser(make_plugins(), "import").parse_args(argv)
    assert _run_import(args, make_plugins(watcher)) == 0
    [saved] = results.glob("*/*_pb.json")
    assert watcher.events == [("start", "import"), ("finish", "pytest-benchmark")]
    assert saved_lines(capsys.readouterr().err) == [f"results record: {saved}"]


def test_an_error_after_the_run_started_still_fires_finish_with_the_error() -> None:
    watcher, errors = Watcher(), ErrorWatcher()
    problem = RuntimeError("the server went away")
    with pytest.raises(RuntimeError, match="went away"), Run(make_plugins(watcher, errors), "collect", "c") as run:
        raise problem
    assert watcher.events == [("start", "collect"), ("finish", "collect")]  # a hook without `error` still runs
    assert errors.finished == [(0, problem)] and run.saved_path is None


def test_a_finished_run_fires_finish_once_without_an_error(tmp_path: Path) -> None:
    errors = ErrorWatcher()
    with Run(make_plugins(errors), "collect", "c", results_dir=tmp_path) as run:
        run.finish([])
    assert errors.finished == [(0, None)] and run.saved_path is not None


def test_a_collection_whose_backend_fails_after_the_start_fires_finish_with_the_error(tmp_path: Path) -> None:
    def broken(options: Any) -> Any:
        raise GymbenchError("backend 'broken' cannot reach its server")

    class Broken:
        @hookimpl
        def gymbench_register_backends(self) -> list[Component]:
            return [Component("broken", broken)]

    errors = ErrorWatcher()
    words = [f"input_jsonl_fpath={EXAMPLES}", f"output_jsonl_fpath={tmp_path / 'o.jsonl'}", "backend=broken",
             "base_url=http://127.0.0.1:9", "progress=false", f"results_dir={tmp_path}"]  # fmt: skip
    config = build_settings(CollectConfig, words)
    with pytest.raises(GymbenchError, match="cannot reach"):
        run_collect(config, make_plugins(Broken(), errors))
    [(benchmarks, error)] = errors.finished
    assert benchmarks == 0 and isinstance(error, GymbenchError) and not list(tmp_path.glob("*/*_collect.json"))


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
    assert main(["show", "a.json", "extra=1"]) == 2  # show reads +key=value like every command: an unknown one
    assert "unknown setting 'extra'; known settings: path" in capsys.readouterr().err
    assert main(["show", "a.json", "b.json"]) == 2
    assert "unexpected 'b.json': expected PATH" in capsys.readouterr().err
