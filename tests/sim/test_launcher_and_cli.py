"""Starting and stopping the server as tests, benchmarks and the CLI do, with no orphans left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.sim import running_sim_server
from gymbench.testing import terminal_sigint

from .conftest import MODEL


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:  # a zombie counts as gone
        return handle.read().split()[2] != "Z"


def _wait_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_context_manager_stops_the_process_even_when_the_body_fails() -> None:
    with pytest.raises(RuntimeError):
        with running_sim_server(preset="zero-latency") as server:
            pid = server.process.pid
            assert _alive(pid)
            raise RuntimeError("test body failed")
    assert _wait_gone(pid)


def test_server_dies_with_a_killed_parent(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from gymbench.sim import start_sim_server
        server = start_sim_server(preset="zero-latency")
        print(server.process.pid, server.port, flush=True)
        time.sleep(60)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child_pid, port = map(int, parent.stdout.readline().split())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
            assert answer.status == 200
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert _wait_gone(child_pid), "the simulated server outlived its killed parent"
    finally:
        parent.kill()


def test_startup_failure_is_reported_with_the_childs_stderr() -> None:
    from gymbench.errors import GymbenchError
    from gymbench.sim import start_sim_server

    with pytest.raises(GymbenchError, match="simulated server"):
        start_sim_server(host="256.0.0.1")


def test_cli_describe(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim-server", "--preset", "small-slow", "--describe"]) == 0
    out = capsys.readouterr().out
    assert "saturates at concurrency 4" in out
    assert main(["sim-server", "--describe", "--json", "--max-num-seqs", "8", "--prompt-tokens", "64"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["capacity"]["saturation_concurrency"] == 8
    assert data["capacity"]["prompt_tokens"] == 64


def test_cli_settings_file_and_its_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "sim.yaml"
    good.write_text("preset: sglang-like\nmax_num_seqs: 7\n")
    assert main(["sim-server", "--config", str(good), "--describe", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["config"]["max_num_seqs"] == 7 and data["config"]["step_base_s"] == 0.015
    bad = tmp_path / "bad.yaml"
    bad.write_text("max_num_seqs: [1, 2\n")
    assert main(["sim-server", "--config", str(bad), "--describe"]) == 2
    assert f"{bad}: not valid YAML/JSON" in capsys.readouterr().err
    assert main(["sim-server", "--config", str(tmp_path / "none.yaml"), "--describe"]) == 2
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("max_seqs: 3\n")
    assert main(["sim-server", "--config", str(unknown), "--describe"]) == 2
    assert "unknown setting 'max_seqs'" in capsys.readouterr().err


def test_cli_serves_in_the_foreground_and_stops_on_sigint() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "gymbench.cli", "sim-server", "--preset", "zero-latency", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=terminal_sigint,
    )
    try:
        line = process.stdout.readline()
        assert "listening on http://127.0.0.1:" in line
        url = line.split("listening on ")[1].split()[0]
        body = json.dumps({"model": MODEL, "prompt": "1 + 1 ="}).encode()
        request = urllib.request.Request(f"{url}/completions", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as answer:
            assert json.loads(answer.read())["object"] == "text_completion"
        process.send_signal(signal.SIGINT)
        assert process.wait(10) == 0
    finally:
        process.kill()


def test_cli_serves_replicas_the_last_one_slower() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "gymbench.cli", "sim-server", "--preset", "zero-latency", "--port", "0",
         "+replicas=2", "+slow_replica_factor=3", "+step_base_s=0.001"],
        stdout=subprocess.PIPE, text=True, preexec_fn=terminal_sigint,
    )  # fmt: skip
    try:
        line = process.stdout.readline()
        assert "replicas listening: +base_url=[" in line
        urls = line.split("+base_url=[")[1].split("]")[0].split(", ")
        assert len(urls) == 2 and len(set(urls)) == 2
        for url in urls:
            with urllib.request.urlopen(f"{url}/models", timeout=5) as answer:
                assert json.loads(answer.read())["data"]
        process.send_signal(signal.SIGINT)
        assert process.wait(10) == 0
    finally:
        process.kill()


def test_a_slowed_replica_scales_every_step_cost() -> None:
    from gymbench.sim.config import SimConfig, slowed

    config = SimConfig(step_base_s=0.01, step_per_seq_s=0.001, prefill_per_token_s=1e-5, step_curve_s={1: 0.002})
    slow = slowed(config, 2.0)
    assert (slow.step_base_s, slow.step_per_seq_s, slow.step_curve_s) == (0.02, 0.002, {1: 0.004})
    assert slow.prefill_per_token_s == 2e-5 and slowed(config, 1.0) is config
