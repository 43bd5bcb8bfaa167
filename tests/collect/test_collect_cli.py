"""``gymbench collect`` end to end, as a user runs it: a real process, the simulator, real files."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gymbench.record import load_record
from gymbench.sim import start_sim_server
from gymbench.testing import terminal_sigint

from ..rollout.test_dataset import write_tasks

EXAMPLES = Path(__file__).resolve().parents[2] / "gymbench" / "data" / "example_tasks.jsonl"
FAST_SIM = ["+sim.step_base_s=0.004", "+sim.step_per_seq_s=0", "+sim.output_tokens_mean=8"]


def gymbench(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gymbench.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_nemo_gym_syntax_on_the_embedded_simulator(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    done = gymbench(
        "collect",
        f"+input_jsonl_fpath={EXAMPLES}",
        f"+output_jsonl_fpath={out}",
        "+num_samples_in_parallel=16",
        "+limit=40",
        "+num_repeats=2",
        f"+results_dir={tmp_path / 'results'}",
        "+responses_create_params.max_output_tokens=12",
        *FAST_SIM,
    )
    assert done.returncode == 0, done.stderr
    written = rows(out)
    assert len(written) == 80
    assert {(r["task_index"], r["rollout_index"]) for r in written} == {(t, k) for t in range(40) for k in range(2)}
    assert all(r["status"] == "ok" and r["responses_create_params"]["max_output_tokens"] == 12 for r in written)
    assert 0.5 < sum(r["reward"] for r in written) / 80 < 1.0  # the simulator is right 80% of the time
    assert "no server set: using the simulated server" in done.stderr
    assert "rollouts/s" in done.stderr and "latency p50" in done.stderr
    summary = json.loads(out.with_name("out.jsonl.metrics.json").read_text())["summary"]
    assert summary["completed"] == 80
    record = load_record(next((tmp_path / "results").glob("*/*_collect.json")))
    assert record.kind == "collect" and record.benchmarks[0].metrics["rollouts_per_s"].value > 0


def test_flag_syntax_and_start_end(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    done = gymbench(
        "collect", "--input-jsonl-fpath", str(EXAMPLES), "--output-jsonl-fpath", str(out),
        "--start-idx", "10", "--end-idx", "15", "--num-samples-in-parallel", "4", "--save-results", "false",
        "--api", "chat", "--stream", "true", *FAST_SIM,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = rows(out)
    assert sorted(r["task_index"] for r in written) == [10, 11, 12, 13, 14]
    assert all("ttft" in r["timings"] for r in written)


def test_resume_after_sigkill_at_a_random_moment(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 150)
    kill_after = random.randint(1, 250)  # rows on disk before the kill: anywhere in the run
    out = tmp_path / "out.jsonl"
    args = [
        "collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+num_samples_in_parallel=8",
        "+num_repeats=2", "+save_results=false", "+progress=false", *FAST_SIM,
    ]  # fmt: skip
    process = subprocess.Popen([sys.executable, "-m", "gymbench.cli", *args], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not out.exists() or out.read_bytes().count(b"\n") < kill_after:
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    before = len(out.read_text().splitlines())
    assert 0 < before < 300, "the kill should land mid-run"
    done = gymbench(*args, "+resume=true")
    assert done.returncode == 0, done.stderr
    pairs = [(r["task_index"], r["rollout_index"]) for r in rows(out)]
    assert len(pairs) == len(set(pairs)) == 300
    assert set(pairs) == {(t, k) for t in range(150) for k in range(2)}


def test_sigint_stops_cleanly_and_the_run_resumes(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 400)
    out = tmp_path / "out.jsonl"
    args = [
        "collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+num_samples_in_parallel=4",
        "+save_results=false", "+progress=false", *FAST_SIM,
    ]  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "gymbench.cli", *args], stderr=subprocess.PIPE, text=True, preexec_fn=terminal_sigint
    )
    deadline = time.monotonic() + 60
    while not out.exists() or out.stat().st_size == 0:
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    assert "+resume=true" in stderr and "Traceback" not in stderr
    partial = rows(out)
    assert 0 < len(partial) < 400 and all(r["status"] == "ok" for r in partial)
    assert gymbench(*args, "+resume=true").returncode == 0
    assert sorted(r["task_index"] for r in rows(out)) == list(range(400))


def test_existing_output_needs_resume_or_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"task_index": 0, "rollout_index": 0, "status": "ok"}\n')
    done = gymbench("collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}", "+limit=2")
    assert done.returncode == 2
    assert "already exists" in done.stderr and out.read_text().count("\n") == 1


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["+limit=abc"], "setting 'limit'"),
        (["+num_samples_in_paralel=4"], "unknown setting 'num_samples_in_paralel'"),
        (["+start_idx=9", "+end_idx=3"], r"setting 'end_idx': got 3, expected at least start_idx \(9\)"),
        (["+num_samples_in_parallel=0"], "setting 'num_samples_in_parallel': got 0, expected a number of at least 1"),
        (["+backend=tgi"], "unknown backend 'tgi'; known backends: nemo-gym, openai"),
        (["+strategy=magic"], "unknown strategy 'magic'; known strategies:"),
        (["+verifier=judge"], "unknown verifier 'judge'; known verifiers:"),
        (
            ["+input_jsonl_fpath=/nonexistent/tasks.jsonl"],
            r"/nonexistent/tasks.jsonl: input file not found; pass \+input_jsonl_fpath=",
        ),
        (["+backend=openai"], r"needs \+base_url"),
        (["limit"], r"expected \+key=value"),
    ],
)
def test_bad_settings_are_clear_errors(tmp_path: Path, settings: list[str], message: str) -> None:
    base = [f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={tmp_path / 'o.jsonl'}"]
    done = gymbench("collect", *base, *settings, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("gymbench: error:") == 1 and "Traceback" not in done.stderr
    assert re.search(message, done.stderr), done.stderr


def test_malformed_task_file_names_file_and_line(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"responses_create_params": {"input": "x"}}\n{"oops"\n')
    done = gymbench("collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={tmp_path / 'o.jsonl'}")
    assert done.returncode == 2
    assert f"{tasks}:2: malformed JSON" in done.stderr


def test_unreachable_server_fails_fast_and_clearly(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = gymbench(
        "collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={tmp_path / 'o.jsonl'}",
        "+backend=openai", f"+base_url=http://127.0.0.1:{port}/v1", "+model=m",
    )  # fmt: skip
    # a server outage is not bad input (2): it stops the run early (1), and a resume or a rerun picks it up
    assert done.returncode == 1 and "cannot reach the model server" in done.stderr and "after 3 tries" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("gymbench: error:"), done.stderr  # no aiohttp noise after


def test_api_key_is_never_written(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    secret = "sk-never-write-me-42"
    done = gymbench(
        "collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}", "+limit=5",
        f"+results_dir={tmp_path / 'results'}", "+api_key_env=GYMBENCH_TEST_KEY", *FAST_SIM,
        env={"GYMBENCH_TEST_KEY": secret, "OPENAI_API_KEY": secret},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for path in [out, out.with_name("out.jsonl.metrics.json"), *(tmp_path / "results").rglob("*.json")]:
        assert secret not in path.read_text(), path
    assert secret not in done.stderr + done.stdout


def test_server_faults_are_retried_through(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    done = gymbench(
        "collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}", "+limit=30",
        "+num_samples_in_parallel=8", "+save_results=false", "+sim.error_rate=0.3", "+sim.reset_rate=0.1",
        "+backend_options.backoff_base_s=0.01", "+max_retries=10", *FAST_SIM,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(out.with_name("out.jsonl.metrics.json").read_text())["summary"]
    assert summary["completed"] == 30 and summary["retries"] > 0


def test_nemo_gym_backend_against_the_simulators_agent_mode(tmp_path: Path) -> None:
    """The simulator's ``/run`` stands in for an agent only when pointed at: naming it is no fallback."""
    sim = start_sim_server(step_base_s=0.004, step_per_seq_s=0.0, output_tokens_mean=8)
    out = tmp_path / "out.jsonl"
    try:
        done = gymbench(
            "collect", "+backend=nemo-gym", f"+agent_url={sim.url}", f"+input_jsonl_fpath={EXAMPLES}",
            f"+output_jsonl_fpath={out}", "+limit=30", "+num_samples_in_parallel=8", "+save_results=false",
            "+agent_name=simple_agent",
        )  # fmt: skip
    finally:
        sim.stop()
    assert done.returncode == 0, done.stderr
    written = rows(out)
    assert len(written) == 30 and all(r["status"] == "ok" for r in written)
    for row in written:
        assert row["response"]["object"] == "response"
        text = row["response"]["output"][0]["content"][0]["text"]
        assert row["reward"] == (1.0 if text.splitlines()[-1] == row["expected_answer"] else 0.0)
        assert row["verifier"]["name"] == "agent" and row["agent_ref"] == {"name": "simple_agent"}
    assert 0 < sum(r["reward"] for r in written) < 30


def test_rows_naming_their_agents_go_to_the_head_server_never_to_the_simulator(tmp_path: Path) -> None:
    """NeMo Gym routes a row with an agent_ref to its agent: with no server named, such rows were
    answered by the simulator and the run exited 0 with rows that looked like the agent's (issue 40).
    Now they go to NeMo Gym's default head server (127.0.0.1:11000), which is not running here."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 11000)) == 0:
            pytest.skip("something listens on 127.0.0.1:11000, NeMo Gym's default head server port")
    tasks = tmp_path / "tasks.jsonl"
    agent_row = '{"responses_create_params": {"input": "2+2"}, "agent_ref": {"name": "simple_agent"}}\n'
    tasks.write_text('{"responses_create_params": {"input": "1+1"}}\n' + agent_row)
    out = tmp_path / "rollouts.jsonl"
    done = gymbench("collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+progress=false",
                    "+max_retries=0", "+num_samples_in_parallel=2")  # fmt: skip
    assert done.returncode != 0
    assert "tasks.jsonl: the tasks name NeMo Gym agents (agent_ref, task 1 first)" in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("gymbench: error")]
    assert len(errors) == 1 and "head server at http://127.0.0.1:11000" in errors[0], done.stderr
    assert not [row for row in (rows(out) if out.exists() else []) if row.get("model") == "gymbench-sim"]
