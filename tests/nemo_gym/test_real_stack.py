"""gymbench against NeMo Gym's real stack (``ng_run``: head server, simple agent,
example_single_tool_call, openai_model in front of the simulator), beside NeMo Gym's own collection.

Skipped with the reason where no NeMo Gym venv can be had (no Python >= 3.13 to build one).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gymbench.engine.nemo_gym_stack import NeMoGymStack, example_tasks
from gymbench.record import load_record
from tests.collect.test_collect_cli import gymbench, rows

pytestmark = [pytest.mark.real_nemo_gym, pytest.mark.slow]
TASKS = 50
ROUTE_STAMPS = ("_ng_environment_server", "_ng_result_type")
"""0.7.0's ``ng_run`` puts a generated ``legacy_agent`` environment server in front of the example agent;
both tools dispatch through it and stamp its name and type on each row."""


def distinct_tasks(venv: Path, path: Path, count: int = TASKS) -> Path:
    """``count`` tasks made distinct from the 5 the example ships (each user turn gets its number)."""
    shipped = [json.loads(line) for line in example_tasks(venv).read_text().splitlines() if line.strip()]
    with path.open("w") as out:
        for index in range(count):
            task = json.loads(json.dumps(shipped[index % len(shipped)]))
            task["responses_create_params"]["input"][-1]["content"] += f" (task {index})"
            out.write(json.dumps(task) + "\n")
    return path


def nemo_gym_collects(stack: NeMoGymStack, tasks: Path, out: Path, *flags: str) -> None:
    """NeMo Gym 0.7.0's own collection: ``gym eval run --no-serve`` (``ng_collect_rollouts`` before)."""
    command = [
        str(stack.venv / "bin" / "gym"), "eval", "run", "--no-serve", "--agent", stack.agent_name,
        "--input", str(tasks), "--output", str(out), "--concurrency", "16", *flags,
        "+head_server.host=127.0.0.1", f"+head_server.port={stack.head_port}",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=out.parent)
    assert done.returncode == 0, done.stderr[-2000:]


def collect_args(stack: NeMoGymStack, tasks: Path, out: Path) -> list[str]:
    return [
        "collect", f"+agent_name={stack.agent_name}", f"+head_server.port={stack.head_port}",
        f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+num_samples_in_parallel=16",
        "+save_results=false", "+progress=false",
    ]  # fmt: skip


def by_pair(written: list[dict[str, Any]]) -> dict[tuple[int, int], dict[str, Any]]:
    pairs = {(row["_ng_task_index"], row["_ng_rollout_index"]): row for row in written}
    assert len(pairs) == len(written), "a pair was written twice"
    return pairs


def test_collect_joins_nemo_gyms_own_collection_on_the_same_stack(
    gymbench_nemo_gym_stack: NeMoGymStack, tmp_path: Path
) -> None:
    stack = gymbench_nemo_gym_stack
    tasks = distinct_tasks(stack.venv, tmp_path / "tasks.jsonl")
    theirs_path, ours_path = tmp_path / "theirs.jsonl", tmp_path / "ours.jsonl"
    nemo_gym_collects(stack, tasks, theirs_path)
    done = gymbench(*collect_args(stack, tasks, ours_path), timeout=300)
    assert done.returncode == 0, done.stderr
    theirs, ours = by_pair(rows(theirs_path)), by_pair(rows(ours_path))
    assert set(ours) == set(theirs) == {(task, 0) for task in range(TASKS)}
    for pair, row in ours.items():
        assert row["responses_create_params"] == theirs[pair]["responses_create_params"]
        assert row["responses_create_params"]["input"][-1]["content"].endswith(f"(task {pair[0]})")
        assert row["agent_ref"] == theirs[pair]["agent_ref"] == {"name": stack.agent_name}
        assert row["reward"] in (0.0, 1.0) and theirs[pair]["reward"] in (0.0, 1.0)
        assert row["response"]["model"] == theirs[pair]["response"]["model"] == "gymbench-sim"
        assert [row[key] for key in ROUTE_STAMPS] == [theirs[pair][key] for key in ROUTE_STAMPS]
    environment = stack.server("environment_servers")
    assert {(row["_ng_environment_server"], row["_ng_result_type"]) for row in ours.values()} == {
        (environment.name, "legacy_agent")
    }
    aggregate = json.loads((tmp_path / "ours_aggregate_metrics.json").read_text())
    assert [entry["agent_ref"] for entry in aggregate] == [{"name": stack.agent_name}]


def test_a_run_nemo_gym_started_then_one_gymbench_killed_resume_to_every_pair_once(
    gymbench_nemo_gym_stack: NeMoGymStack, tmp_path: Path
) -> None:
    stack = gymbench_nemo_gym_stack
    tasks = distinct_tasks(stack.venv, tmp_path / "tasks.jsonl")
    out = tmp_path / "out.jsonl"
    nemo_gym_collects(stack, tasks, out, "--limit", "10")
    started_by_nemo_gym = out.read_text()
    args = [*collect_args(stack, tasks, out), "+num_samples_in_parallel=2", "+resume=true"]
    process = subprocess.Popen([sys.executable, "-m", "gymbench.cli", *args], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while out.read_bytes().count(b"\n") < 20:  # killed once it has written some of its own
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    assert out.read_bytes().count(b"\n") < TASKS, "the kill should land mid-run"
    done = gymbench(*args, timeout=300)
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith(started_by_nemo_gym)  # NeMo Gym's rows kept as they were
    written = by_pair(rows(out))
    assert set(written) == {(task, 0) for task in range(TASKS)}
    assert len({tuple(row[key] for key in ROUTE_STAMPS) for row in written.values()}) == 1  # theirs and ours


def test_the_fixture_lists_every_server_with_its_pid(gymbench_nemo_gym_stack: NeMoGymStack) -> None:
    stack = gymbench_nemo_gym_stack
    types = {server.server_type for server in stack.servers}
    assert {"responses_api_agents", "resources_servers", "responses_api_models", "environment_servers"} <= types
    assert stack.agent_name in {server.name for server in stack.servers}
    for pid in stack.pids().values():
        assert Path(f"/proc/{pid}").exists()


def diagnose_stack(stack: NeMoGymStack, tmp_path: Path, low: int, high: int) -> dict[str, Any]:
    """``gymbench diagnose`` against the stack's agent; its saved record's verdict and per-server figures."""
    tasks = distinct_tasks(stack.venv, tmp_path / "tasks.jsonl", 200)
    done = gymbench(
        "diagnose", f"+agent_name={stack.agent_name}", f"+head_server.port={stack.head_port}",
        f"+input_jsonl_fpath={tasks}", f"+low={low}", f"+high={high}", "+progress=false",
        f"+results_dir={tmp_path / 'results'}", "+max_batches=8", timeout=500,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = next((tmp_path / "results").glob("*/*_diagnose.json"))
    [bench] = load_record(record).benchmarks
    return {**bench.extra, "stdout": done.stdout, "metrics": bench.metrics, "record": record}


def cpu_by_ps(pids: list[int]) -> dict[int, int]:
    """Each process's CPU seconds as procps's ``ps`` counts them: a check on gymbench's own /proc reading."""
    listing = subprocess.run(
        ["ps", "-o", "pid=,times=", "-p", ",".join(map(str, pids))], capture_output=True, text=True
    )
    return {int(pid): int(seconds) for pid, seconds in (line.split() for line in listing.stdout.splitlines())}


def test_diagnose_names_the_agent_server_when_the_model_is_instant(
    gymbench_nemo_gym_stack: NeMoGymStack, tmp_path: Path
) -> None:
    pids = list(gymbench_nemo_gym_stack.pids().values())
    before = cpu_by_ps(pids)
    found = diagnose_stack(gymbench_nemo_gym_stack, tmp_path, 4, 32)
    after = cpu_by_ps(pids)
    assert found["verdict"] == "agent server", found["stdout"]
    for server in found["servers"]:  # the high probe's CPU lies within what ps saw over the whole diagnose
        assert server["cpu_s"] <= after[server["pid"]] - before[server["pid"]] + 1.0
    servers = {server["role"]: server for server in found["servers"]}
    assert {"agent server", "resources server", "model adapter", "environment server"} <= set(servers)
    for role in ("agent server", "resources server", "model adapter", "environment server"):  # rows go through each
        assert (
            servers[role]["cpu_ms_per_rollout"] > 0 and servers[role]["pid"] in gymbench_nemo_gym_stack.pids().values()
        )
    assert "driver (gymbench):" in found["stdout"]
    for server in found["servers"]:  # each server's CPU per rollout is a metric, for `gymbench compare`
        if server["cpu_ms_per_rollout"] is not None:
            metric = found["metrics"][f"cpu_ms_per_rollout[{server['name']}]"]
            assert metric.value == server["cpu_ms_per_rollout"] and metric.unit == "ms"
    (tmp_path / "again").mkdir()
    again = diagnose_stack(gymbench_nemo_gym_stack, tmp_path / "again", 4, 32)  # the same stack, measured again
    compared = gymbench("compare", str(found["record"]), str(again["record"]), "-v", timeout=120)
    assert compared.returncode in (0, 1, 3), compared.stderr  # one run a side: the verdict is noise's, not ours
    assert f"CPU per rollout, {servers['agent server']['name']}" in compared.stdout, compared.stdout


def test_diagnose_names_the_model_server_when_the_model_is_slow(
    gymbench_nemo_gym_stack_factory: Any, tmp_path: Path
) -> None:
    stack = gymbench_nemo_gym_stack_factory(
        step_base_s=0.05, step_per_seq_s=0.0, prefill_per_token_s=0.0, max_num_seqs=2, output_tokens_mean=8
    )
    found = diagnose_stack(stack, tmp_path, 4, 16)
    assert found["verdict"] == "model server", found["stdout"]
    assert all(server["unseen"] is None for server in found["servers"])
