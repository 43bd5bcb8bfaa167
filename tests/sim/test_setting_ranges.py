"""Every numeric simulator setting has a range that makes physical sense, and nothing the simulator
is allowed to do holds its event loop: Ctrl-C lands however long a simulated step is (issue 41).

A profile with ``step_base_s: 1.0e308`` was accepted and the collect against it needed SIGKILL; an
output of 1e8 tokens (``output_tokens_mean``, no bound) held the server's loop for minutes, and a run
of free decode steps held it until the last token of the longest answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import signal
import socket
import subprocess
import sys
import time
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from gymbench.cli import main
from gymbench.errors import GymbenchError
from gymbench.sim import InProcessBackend, SimConfig
from gymbench.sim.config import RANGES, load_profile
from gymbench.testing import terminal_sigint
from gymbench.types import GenerationRequest

pytestmark = pytest.mark.hostile


def _profile(tmp_path: Path, sim: dict[str, Any]) -> Path:
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump({"format": "gymbench-sim-profile/1", "sim": sim}))
    return path


def _numeric_settings() -> list[str]:
    hints = typing.get_type_hints(SimConfig)
    numeric = {int, float, int | None, float | None}
    return [field.name for field in dataclasses.fields(SimConfig) if hints[field.name] in numeric]


def test_every_numeric_simulator_setting_has_a_range() -> None:
    """A setting added later is in :data:`RANGES` or this fails: coverage follows the code."""
    assert sorted(_numeric_settings()) == sorted(RANGES)


@pytest.mark.parametrize(
    ("sim", "expected"),
    [
        ({"step_base_s": 1.0e308}, "step_base_s must be at most 60 s, got 1e+308 (from 0 to 60 s)"),
        ({"step_base_s": 1.0e9}, "step_base_s must be at most 60 s"),
        ({"output_tokens_mean": 100_000_000}, "output_tokens_mean must be at most 1,000,000 tokens"),
        ({"max_output_tokens": 10**30}, "max_output_tokens must be at most 1,000,000 tokens"),
        ({"max_num_seqs": 10**12}, "max_num_seqs must be at most 1,000,000 sequences"),
        ({"max_num_batched_tokens": 10**12}, "max_num_batched_tokens must be at most 10,000,000 tokens"),
        ({"kv_cache_tokens": 10**15}, "kv_cache_tokens must be at most 1,000,000,000 tokens"),
        ({"max_waiting": 10**12}, "max_waiting must be at most 10,000,000 requests"),
        ({"collapse_threshold": -1}, "collapse_threshold must not be negative"),
        ({"collapse_slope": -1.0}, "collapse_slope must not be negative, got -1 (a step-time factor from 0 to 1000)"),
        ({"collapse_slope": 1.0e308}, "collapse_slope must be at most 1000"),
        ({"warmup_s": 1.0e9}, "warmup_s must be at most 3600 s"),
        (
            {"warmup_slowdown": 1.0e308},
            "warmup_slowdown must be at most 100, got 1e+308 (a step-time factor from 1 to 100)",
        ),
        (
            {"speed_drift": 0.999999},
            "speed_drift must be at most 0.9, got 0.999999 (a share of the speed from 0 to 0.9)",
        ),
        ({"speed_drift_period_s": 1e-308}, "speed_drift_period_s must be at least 1 s"),
        ({"rpm_limit": 1e308}, "rpm_limit must be at most 1,000,000,000 requests/min"),
        ({"tpm_limit": 0.5}, "tpm_limit must be at least 1 tokens/min"),
        ({"seed": 2**70}, "seed must be at most"),
        ({"step_curve_s": {10**9: 0.01}}, "step_curve_s: running sequences must be whole numbers from 1 to 1,000,000"),
    ],
)
def test_a_profile_value_outside_its_range_is_one_line_naming_file_key_and_range(
    tmp_path: Path, sim: dict[str, Any], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _profile(tmp_path, sim)
    with pytest.raises(GymbenchError, match=f"engine.yaml: sim.{next(iter(sim))}: "):
        load_profile(str(path))
    assert main(["sim-server", f"+profile={path}", "--describe"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gymbench: error:") and "\n" not in err and expected in err, err


@pytest.mark.parametrize("name", sorted(RANGES))
def test_each_range_refuses_past_its_ends_and_takes_its_ends(name: str) -> None:
    low, high = RANGES[name].low, RANGES[name].high
    changes = {"error_rate": 0.0, "hang_rate": 0.0, "reset_rate": 0.0}  # their sum is checked too
    for value in (low, high):
        SimConfig(**{**changes, name: value})
    for value in (low - 1 if isinstance(low, int) else low - 0.5, high * 2 + 1, float("inf"), float("nan")):
        with pytest.raises(GymbenchError, match=f"{name} must"):
            SimConfig(**{**changes, name: value})


def test_free_decode_steps_let_the_server_answer_between_them() -> None:
    """Decode steps that cost nothing (``step_base_s`` and ``step_per_seq_s`` 0, only prefill costs)
    ran back to back without giving the loop back: the server answered nothing, and Ctrl-C waited,
    until the longest answer's last token. Another task now runs between the steps."""
    config = SimConfig(step_base_s=0.0, step_per_seq_s=0.0, prefill_per_token_s=1e-5, output_tokens_mean=2_000)
    backend = InProcessBackend(config)

    async def scenario() -> set[int]:
        async with backend:
            request = GenerationRequest(0, 0, {"input": [{"role": "user", "content": "count"}]})
            answer = asyncio.ensure_future(backend.generate(request))
            seen: set[int] = set()
            while not answer.done():
                seen.add(backend.service.engine.stats.steps)
                await asyncio.sleep(0)
            await answer
            return seen

    seen = asyncio.run(scenario())  # a real loop: a simulated one never idles while the look spins
    assert len(seen) > 1_000, sorted(seen)[:10]  # one look between nearly every one of its 2,000 steps


def _port_announced(process: subprocess.Popen[str]) -> int:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert "listening on http://127.0.0.1:" in line, line
    return int(line.split("127.0.0.1:")[1].split("/")[0])


def _wait_for_a_running_request(port: int) -> None:
    """Until the simulator's engine has a sequence in its (minute-long) step; a deadline, not a sleep."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as metrics:
            metrics.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            text = b"".join(iter(lambda: metrics.recv(65536), b"")).decode()
        if re.search(r"^vllm:num_requests_running\{[^}]*\} 1\.0$", text, re.MULTILINE):
            return
        time.sleep(0.05)
    raise AssertionError("the request never started running")


def test_a_minute_long_simulated_step_does_not_keep_ctrl_c_from_the_server_or_the_collect(tmp_path: Path) -> None:
    """The longest step allowed (a minute) is an ``asyncio.sleep``: Ctrl-C ends ``sim-server`` and a
    collect waiting on it at once, and the collect leaves its rows and no ``out.jsonl.lock``."""
    server = subprocess.Popen(
        [sys.executable, "-m", "gymbench.cli", "sim-server", "+port=0", "+step_base_s=60", "+output_tokens_mean=4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=terminal_sigint,
    )  # fmt: skip
    try:
        port = _port_announced(server)
        tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
        tasks.write_text('{"responses_create_params": {"input": "1+1"}, "expected_answer": "2"}\n')
        collect = subprocess.Popen(
            [sys.executable, "-m", "gymbench.cli", "collect", f"+input_jsonl_fpath={tasks}",
             f"+output_jsonl_fpath={out}", f"+base_url=http://127.0.0.1:{port}/v1", "+model=gymbench-sim",
             "+save_results=false", "+progress=false"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=terminal_sigint,
        )  # fmt: skip
        _wait_for_a_running_request(port)
        collect.send_signal(signal.SIGINT)
        _, collect_err = collect.communicate(timeout=30)
        assert collect.returncode == 130, collect_err
        assert "interrupted" in collect_err and "Traceback" not in collect_err, collect_err
        assert out.exists() and not out.with_name("out.jsonl.lock").exists()
        server.send_signal(signal.SIGINT)
        _, server_err = server.communicate(timeout=30)
        assert server.returncode == 0 and "Traceback" not in server_err, server_err
    finally:
        for process in (server, locals().get("collect")):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
