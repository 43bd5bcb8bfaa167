"""A calibrated profile reaches the simulator process the one way every configuration does.

``gymbench calibrate-sim`` writes ``step_curve_s`` keyed by running sequences (integers); the
simulator that ``collect``, ``tune`` and ``diagnose`` start runs in a process of its own, and its
configuration travels there as JSON, whose keys are text. The profile used to arrive as
``{"1": ...}`` and the process stopped with a traceback, while ``sim-server +profile`` (in this
process) worked. The profile here is written as docs/simulator.md shows one.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.sim import running_sim_server
from gymbench.sim.config import config_from_preset

PROFILE = """\
format: gymbench-sim-profile/1
sim:
  max_num_seqs: 4
  step_curve_s: {1: 0.002, 2: 0.0025, 4: 0.0035}
  prefill_per_token_s: 0.0
  output_tokens_mean: 8
calibration:
  engine: a test
"""


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    path = tmp_path / "engine.yaml"
    path.write_text(PROFILE)
    return path


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"responses_create_params": {"input": "1+1"}, "expected_answer": "2"}\n' * 4)
    return path


def test_the_simulator_process_serves_the_profiles_curve(profile: Path) -> None:
    with running_sim_server(config_from_preset(None, None, str(profile))) as server:
        with urllib.request.urlopen(f"{server.url}/sim/config", timeout=10) as answer:
            served = json.loads(answer.read())["config"]
    assert served["step_curve_s"] == {"1": 0.002, "2": 0.0025, "4": 0.0035}  # JSON's keys, read as numbers there
    assert server.config.step_curve_s == {1: 0.002, 2: 0.0025, 4: 0.0035}


@pytest.mark.parametrize(
    "command",
    [
        ["collect", "+output_jsonl_fpath={out}"],
        ["diagnose", "+low=1", "+high=2", "+min_batches=2", "+max_batches=4", "+sample_size=4"],
        ["tune", "+start=1", "+max_parallelism=2", "+min_batches=2", "+max_batches=4", "+sample_size=4", "+plot="],
    ],
)
def test_collect_tune_and_diagnose_run_the_profiles_simulator(
    command: list[str], profile: Path, tasks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [arg.format(out=tmp_path / "out.jsonl") for arg in command]
    code = main([*args, f"+input_jsonl_fpath={tasks}", f"+sim_profile={profile}", "+progress=false",
                 "+save_results=false"])  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert f"profile {profile}" in printed.err and "Traceback" not in printed.err


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A profile as ``gymbench calibrate-sim`` writes it (not by hand): measured from a stand-in of
    llama.cpp's server (real HTTP, llama.cpp's ``/props`` and ``timings``) with 4 slots and a step
    that bends, so its ``step_curve_s`` has integer keys 1, 2 and 4."""
    from tests.sim.fake_llama import StepModel, fake_llama_server

    out = tmp_path_factory.mktemp("calibrated") / "engine.yaml"
    engine = StepModel(slots=4, a_ms=0.5, c_ms=0.0, curve_ms=(2.0, 2.6, 2.9, 3.1), sleep_scale=1.0)
    with fake_llama_server(engine) as url:
        code = main(["calibrate-sim", "--from", url, f"+output={out}", "+concurrencies=1,2,4",
                     "+load_warmup_s=0.2", "+window_s=1.0", "+output_tokens=8", "+progress=false"])  # fmt: skip
    assert code == 0
    return out


@pytest.mark.parametrize(
    "command",
    [
        ["collect", "+output_jsonl_fpath={out}"],
        ["diagnose", "+low=1", "+high=2", "+min_batches=2", "+max_batches=4", "+sample_size=4"],
        ["tune", "+start=1", "+max_parallelism=2", "+min_batches=2", "+max_batches=4", "+sample_size=4", "+plot="],
    ],
)
def test_a_profile_written_by_calibrate_sim_runs_collect_tune_and_diagnose(
    command: list[str], calibrated: Path, tasks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    curve = yaml.safe_load(calibrated.read_text())["sim"]["step_curve_s"]
    assert curve and all(isinstance(key, int) for key in curve)  # the keys JSON turned into text
    args = [arg.format(out=tmp_path / "out.jsonl") for arg in command]
    code = main([*args, f"+input_jsonl_fpath={tasks}", f"+sim_profile={calibrated}", "+progress=false",
                 "+save_results=false"])  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert f"profile {calibrated}" in printed.err and "Traceback" not in printed.err


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ([], "calibrated with max_output_tokens 8 on every request, but 4 of the first 4 tasks set none"),
        (["+responses_create_params.max_output_tokens=8"], None),
        (
            ["+responses_create_params.max_output_tokens=64"],
            "calibrated on 8 output tokens per request, but the tasks ask for 64",
        ),
    ],
)
def test_a_profile_used_on_another_workload_warns(
    extra: list[str],
    said: str | None,
    calibrated: Path,
    tasks: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The profile records the workload it was fitted on (8 tokens sent on every request); tasks that
    set no length get the calibrated 8 from the simulator but the engine's default from the engine,
    and tasks asking for 64 extrapolate the fit: each is one warning, a matching workload none."""
    code = main(["collect", f"+output_jsonl_fpath={tmp_path / 'out.jsonl'}", f"+input_jsonl_fpath={tasks}",
                 f"+sim_profile={calibrated}", "+progress=false", "+save_results=false", *extra])  # fmt: skip
    printed = capsys.readouterr().err
    assert code == 0, printed
    if said is None:
        assert ": calibrated " not in printed, printed
    else:
        (line,) = [line for line in printed.splitlines() if said in line]
        assert str(calibrated) in line and "+output_tokens" in line
