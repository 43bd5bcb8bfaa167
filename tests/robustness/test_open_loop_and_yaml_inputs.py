"""Issue 41's input files and open-loop settings, through the real CLI: each is one line and a
non-zero exit (or accepted with a stated meaning), never a hang or a traceback.

- an alias bomb through every reader of YAML: a simulator profile, a ``--config`` file, NeMo Gym's
  config (the head server's ``/global_config_dict_yaml``);
- arrival rates and gamma shapes outside what makes sense;
- trace files: negative, unsorted, NaN, huge, empty timestamps, an empty file, words; a repeated
  time is accepted and means simultaneous arrivals;
- a third-party strategy (a real entry-point distribution) whose slot's ``__aexit__`` raises.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.errors import GymbenchError
from gymbench.testing import install_entry_point_plugin

from ..rollout.test_dataset import write_tasks

pytestmark = pytest.mark.hostile

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)
"""Nine levels of nine aliases: 3.5 billion values once expanded."""
FAST = ["+sim.step_base_s=0.001", "+sim.step_per_seq_s=0", "+sim.output_tokens_mean=4"]


def _one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    lines = [line for line in err.splitlines() if not line.startswith("gymbench: warning")]
    assert len(lines) == 1 and lines[0].startswith("gymbench: error:") and "Traceback" not in err, err
    return lines[0]


def test_an_alias_bomb_in_a_profile_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "bomb.yaml"
    calibration = textwrap.indent(BOMB, "  ")
    profile.write_text(f"format: gymbench-sim-profile/1\ncalibration:\n{calibration}sim:\n  model: *i\n")
    line = _one_line(["sim-server", f"+profile={profile}", "--describe"], capsys)
    assert "bomb.yaml: not valid YAML/JSON: its aliases stand for more than 1,000,000 values" in line


@pytest.mark.parametrize("command", ["collect", "sim-server", "tune"])
def test_an_alias_bomb_in_a_config_file_is_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text(BOMB + "model: *i\n")
    line = _one_line([command, "--config", str(config)], capsys)
    assert "settings.yaml: not valid YAML/JSON: its aliases stand for more than 1,000,000 values" in line


def test_an_alias_bomb_in_nemo_gyms_config_is_refused_as_that_config() -> None:
    """The head server's config is read through the same bounded loader (as YAML 1.1, its writer's)."""
    from gymbench.builtin.nemo_gym_head import _config_yaml

    body = json.dumps(BOMB + "agent: *i\n").encode()
    with pytest.raises(GymbenchError) as caught:
        _config_yaml("http://head:11000", body)
    assert "\n" not in str(caught.value) and "head:11000" in str(caught.value), caught.value


@pytest.mark.parametrize(
    ("strategy", "options", "expected"),
    [
        ("constant", ["request_rate=1e-308"], "setting 'request_rate': got 1e-308, expected arrivals per second"),
        ("poisson", ["request_rate=1e-308"], "setting 'request_rate': got 1e-308"),
        ("poisson", ["request_rate=0"], "setting 'request_rate': got 0"),
        ("constant", ["request_rate=1e9"], "from 0.001 to 1e+06"),
        ("gamma", ["request_rate=5", "gamma_shape=0"], "setting 'gamma_shape': got 0.0, expected a shape"),
        ("gamma", ["request_rate=5", "gamma_shape=-1"], "setting 'gamma_shape': got -1.0"),
        ("gamma", ["request_rate=5", "gamma_shape=nan"], "setting 'gamma_shape': got nan, expected a finite number"),
        ("gamma", ["request_rate=5", "gamma_shape=1e308"], "from 0.001 to 1000"),
        ("gamma", ["request_rate=5", "gamma_shape=1e-308"], "from 0.001 to 1000"),
        ("constant", ["request_rate=5", "saturation_window_s=1e300"], "setting 'saturation_window_s'"),
        ("constant", ["request_rate=5", "saturation_window_s=0"], "setting 'saturation_window_s'"),
        ("trace", ["trace_file=t.txt", "trace_time_scale=1e-308"], "setting 'trace_time_scale'"),
    ],
)
def test_an_open_loop_setting_outside_its_range_is_one_line(
    strategy: str, options: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 4)
    given = [f"+strategy_options.{option}" for option in options]
    argv = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={tmp_path / 'out.jsonl'}",
            f"+strategy={strategy}", *given, "+progress=false", "+save_results=false", *FAST]  # fmt: skip
    line = _one_line(argv, capsys)
    assert f"strategy {strategy!r}: " in line and expected in line, line
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "out.jsonl.lock").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "trace.txt: the trace has no arrival times"),
        ("\n\n  \n", "trace.txt: the trace has no arrival times"),
        ("-1\n", "trace.txt:1: expected an arrival time in seconds"),
        ("0.1\n-0.5\n", "trace.txt:2: expected an arrival time"),
        ("0.3\n0.2\n", "trace.txt:2: expected an arrival time"),
        ("NaN\n", "trace.txt:1: expected an arrival time"),
        ('{"timestamp_s": NaN}\n', "trace.txt:1: expected an arrival time"),
        ("Infinity\n", "trace.txt:1: expected an arrival time"),
        ('{"timestamp": ""}\n', "trace.txt:1: expected an arrival time"),
        ('{"timestamp_s": null}\n', "trace.txt:1: expected an arrival time"),
        ("{}\n", "trace.txt:1: expected an arrival time"),
        ("true\n", "trace.txt:1: expected an arrival time"),
        ("0.1\nsoon\n", "trace.txt:2: expected an arrival time"),
        ("1e308\n", "trace.txt:1: an arrival 1e+308 s after the start, more than a week"),
        ("0\n700000\n", "trace.txt:2: an arrival 700000 s after the start, more than a week"),
    ],
)
def test_a_bad_trace_is_one_line_with_file_and_line(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, tasks = tmp_path / "trace.txt", write_tasks(tmp_path / "tasks.jsonl", 4)
    trace.write_text(text)
    argv = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={tmp_path / 'out.jsonl'}",
            "+strategy=trace", f"+strategy_options.trace_file={trace}", "+progress=false", "+save_results=false",
            *FAST]  # fmt: skip
    line = _one_line(argv, capsys)
    assert expected in line, line


def test_a_repeated_trace_time_means_simultaneous_arrivals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace, tasks, out = tmp_path / "trace.txt", write_tasks(tmp_path / "tasks.jsonl", 3), tmp_path / "out.jsonl"
    trace.write_text("0\n0\n0\n")
    argv = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+strategy=trace",
            f"+strategy_options.trace_file={trace}", "+progress=false", "+save_results=false", *FAST]  # fmt: skip
    status = main(argv)
    assert status == 0, capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 3


EXIT_RAISES = """
from contextlib import AbstractAsyncContextManager
from gymbench import Component, hookimpl


class _Slot(AbstractAsyncContextManager):
    async def __aenter__(self):
        return None

    async def __aexit__(self, *exc_info):
        raise RuntimeError("exit broke")


class ExitRaises:
    limit = 2

    def slot(self):
        return _Slot()

    def observe(self, outcome):
        return None


@hookimpl
def gymbench_register_strategies():
    return [Component("exit-raises", lambda options: ExitRaises(), "every slot's exit raises")]
"""


def test_a_plugin_strategy_whose_slot_exit_raises_is_one_line_and_rows_are_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entering a slot and ``observe`` raising were one line; an ``__aexit__`` raising was a traceback."""
    module = "gymbench_exit_raises_strategy"
    (tmp_path / "site").mkdir()
    install_entry_point_plugin(tmp_path / "site", module, EXIT_RAISES)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", 6), tmp_path / "out.jsonl"
    try:
        status = main(["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}",
                       "+strategy=exit-raises", "+progress=false", "+save_results=false", *FAST])  # fmt: skip
    finally:
        sys.modules.pop(module, None)
    err = capsys.readouterr().err
    assert status != 0 and "Traceback" not in err, err
    assert err.count("raised RuntimeError: exit broke") == 1, err
    assert out.exists() and len(out.read_text().splitlines()) >= 1
    assert not out.with_name("out.jsonl.lock").exists()
