"""The ``gymbench`` command through its real console script and through ``main``."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gymbench import Command, hookimpl
from gymbench.cli import build_parser, main
from gymbench.fingerprint import collect_fingerprint
from gymbench.record import BenchmarkResult, Metric, ResultsRecord, save_record
from gymbench.testing import make_plugins


def test_console_script_lists_builtins_with_their_plugins() -> None:
    exe = shutil.which("gymbench")
    assert exe, "the gymbench console script is not installed"
    out = subprocess.run([exe, "plugins"], capture_output=True, text=True, check=True).stdout
    assert re.search(r"exact-match\s+\[gymbench\.builtin\.verifiers\]", out)
    assert re.search(r"semaphore\s+\[gymbench\.builtin\.strategies\]", out)
    assert re.search(r"plugins\s+\[gymbench\.builtin\.commands\]", out)


def test_plugins_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert {"name", "plugin", "description"} <= set(listing["verifier"][0])
    engines = {row["name"]: row["plugin"] for row in listing["engine"]}  # whose /metrics names are known
    assert engines == dict.fromkeys(("llamacpp", "sglang", "tgi", "vllm"), "gymbench.builtin.engines")


def test_show_prints_a_record_and_errors_are_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save_record(ResultsRecord("r", [], collect_fingerprint()), tmp_path / "r.json")
    assert main(["show", str(path)]) == 0
    assert "r (pytest)" in capsys.readouterr().out
    path.write_text("{")
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gymbench: error: {path}:1:2: corrupt results file")
    assert "Traceback" not in err


def test_show_writes_human_units_and_no_empty_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fingerprint = collect_fingerprint()
    fingerprint["commit"] = {"id": None, "dirty": None, "branch": None}
    metrics = {"stage": Metric(8.3551e-05, "s", "lower"), "peak_memory": Metric(4.29e8, "B", "lower"),
               "step_time": Metric.from_samples([0.5, 0.6, 0.7], "s", "lower")}  # fmt: skip
    path = save_record(ResultsRecord("r", [BenchmarkResult("b", metrics=metrics)], fingerprint), tmp_path / "r.json")
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "stage = 83.55 µs (lower is better)" in out and "peak_memory = 409.1 MiB" in out
    assert "step_time = 600 ms (lower is better, 3 samples)" in out
    assert "e-0" not in out and "e+0" not in out and "0 samples" not in out and "None" not in out
    assert "commit: unknown (not run from a git checkout)" in out


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_plugin_adds_a_command_and_an_option_to_another_command() -> None:
    class Extra:
        @hookimpl
        def gymbench_register_commands(self) -> list[Command]:
            return [Command("hello", "say hello", lambda parser: parser.add_argument("--who"), lambda args, plugins: 0)]

        @hookimpl
        def gymbench_add_options(self, parser: argparse.ArgumentParser, command: str) -> None:
            if command == "plugins":
                parser.add_argument("--extra-flag", action="store_true")

    plugins = make_plugins(Extra())
    assert build_parser(plugins, "hello").parse_args(["hello", "--who", "me"]).who == "me"
    assert build_parser(plugins, "plugins").parse_args(["plugins", "--extra-flag"]).extra_flag is True


def test_module_entry_runs() -> None:
    done = subprocess.run([sys.executable, "-m", "gymbench.cli", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("gymbench ")


@pytest.mark.parametrize(("command", "own"), [("train", "+batch="), ("merge-rollouts", "+num_repeats="),
                                              ("collect", "+num_samples_in_parallel=")])  # fmt: skip
def test_each_commands_help_gives_an_example_of_its_own_settings(
    command: str, own: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"e.g. {own}" in text


def test_plugins_and_report_help_say_what_they_cover(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plugins", "--help"])
    assert "model" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "-o FILE, --output FILE the HTML file to write" in text


def test_an_error_holding_control_characters_reaches_the_terminal_escaped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Any command's error may quote data (a file name, a server's text): the CLI escapes what would
    act on a terminal, line by line, so a deliberate multi-line error keeps its lines."""
    import gymbench.plugins
    from gymbench.errors import GymbenchError

    def fail(args: argparse.Namespace, plugins: object) -> int:
        raise GymbenchError("bad \x1b[2J name \u202eeman\nsecond line")

    class Loud:
        @hookimpl
        def gymbench_register_commands(self) -> list[Command]:
            return [Command("loud", "fail loudly", lambda parser: None, fail)]

    real = gymbench.plugins.get_plugin_manager
    monkeypatch.setattr(gymbench.plugins, "get_plugin_manager", lambda *a, **k: real([Loud()], *a[1:], **k))
    assert main(["loud"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\u202e" not in err
    assert "gymbench: error: bad \\x1b[2J name \\u202eeman\nsecond line" in err
