"""``gymbench collect`` as a NeMo Gym user runs it, against the agent stack: a real process, real files."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gymbench.sim import SimServerHandle
from tests.collect.test_collect_cli import EXAMPLES, gymbench, rows

from .stack import PARAM_DEFAULTS, AgentStack, normalise_params, running_stack

AGGREGATE_KEYS = ["agent_ref", "agent_metrics", "key_metrics", "group_level_metrics"]


@pytest.fixture
def agents(sim: SimServerHandle) -> Iterator[AgentStack]:
    with running_stack(sim.base_url, model=sim.config.model, agent_names=("simple_agent", "math_agent")) as stack:
        yield stack


def collect(stack: AgentStack, out: Path, *settings: str, tasks: Path = EXAMPLES) -> Any:
    return gymbench(
        "collect", f"+head_server.port={stack.head_port}", f"+input_jsonl_fpath={tasks}",
        f"+output_jsonl_fpath={out}", "+num_samples_in_parallel=8", "+save_results=false", *settings,
    )  # fmt: skip


def input_rows(path: Path = EXAMPLES) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_agent_name_is_all_a_nemo_gym_user_needs_and_rows_read_as_nemo_gyms(agents: AgentStack, tmp_path: Path) -> None:
    out = tmp_path / "rollouts.jsonl"
    done = collect(agents, out, "+agent_name=simple_agent", "+limit=20", "+num_repeats=2")
    assert done.returncode == 0, done.stderr
    assert "simulated server" not in done.stderr
    written, tasks = rows(out), input_rows()
    pairs = sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in written)
    assert pairs == sorted(agents.agents["simple_agent"].seen) and len(set(pairs)) == 40
    for row in written:
        assert (row["_ng_task_index"], row["_ng_rollout_index"]) == (row["task_index"], row["rollout_index"])
        assert row["agent_ref"] == {"name": "simple_agent"} and row["verifier"]["name"] == "agent"
        sent = tasks[row["_ng_task_index"]]["responses_create_params"]
        assert row["responses_create_params"] == normalise_params(sent)  # the agent's normalised request
        assert list(row["responses_create_params"]) == list(PARAM_DEFAULTS)
        assert row["reward"] == (1.0 if row["extracted_answer"] == row["expected_answer"] else 0.0)
        assert row["response"]["usage"]["output_tokens"] > 0
    assert agents.resources["math_agent"].verified == 0


def test_the_aggregate_metrics_file_has_nemo_gyms_name_and_shape_from_the_agent(
    agents: AgentStack, tmp_path: Path
) -> None:
    out = tmp_path / "run.one.jsonl"
    done = collect(agents, out, "+agent_name=simple_agent", "+limit=12", "+num_repeats=3")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "run.one_aggregate_metrics.json"
    assert f"aggregate metrics (NeMo Gym's): {path}" in done.stderr
    listing = json.loads(path.read_text())
    assert [list(entry) for entry in listing] == [AGGREGATE_KEYS]
    entry = listing[0]
    by_task: dict[int, list[float]] = {}
    for row in rows(out):
        by_task.setdefault(row["_ng_task_index"], []).append(row["reward"])
    pass_at_1 = sum(sum(r) / len(r) for r in by_task.values()) / len(by_task)
    assert entry["agent_ref"] == {"name": "simple_agent"}
    assert entry["key_metrics"] == {"pass@1": pytest.approx(pass_at_1)}  # the resources server's own metric
    assert [g["_ng_task_index"] for g in entry["group_level_metrics"]] == list(range(12))
    assert out.with_name("run.one.jsonl.metrics.json").is_file()  # gymbench's own, beside it


def test_an_agent_without_aggregate_metrics_gets_nemo_gyms_baseline(sim: SimServerHandle, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with running_stack(sim.base_url, model=sim.config.model, aggregates=False) as stack:
        done = collect(stack, out, "+agent_name=simple_agent", "+limit=10", "+num_repeats=2")
    assert done.returncode == 0, done.stderr
    assert "agent 'simple_agent' did not aggregate its rollouts (http_error: HTTP 404" in done.stderr
    [entry] = json.loads((tmp_path / "out_aggregate_metrics.json").read_text())
    rewards = [row["reward"] for row in rows(out)]
    assert entry["agent_metrics"]["mean/reward"] == pytest.approx(sum(rewards) / len(rewards))
    assert set(entry["key_metrics"]) == {k for k in entry["agent_metrics"] if k.startswith("mean/")}
    assert {"mean/reward", "mean/output_tokens", "std/reward", "median/reward"} <= set(entry["agent_metrics"])
    assert "mean/retries" not in entry["agent_metrics"]  # gymbench's bookkeeping is not a metric
    assert [g["num_rollouts"] for g in entry["group_level_metrics"]] == [2] * 10


def test_rows_route_to_the_agent_their_agent_ref_names(agents: AgentStack, tmp_path: Path) -> None:
    tasks = tmp_path / "mixed.jsonl"
    mixed = [
        {**row, "agent_ref": {"name": "math_agent" if index % 3 == 0 else "simple_agent"}}
        for index, row in enumerate(input_rows()[:30])
    ]
    tasks.write_text("".join(json.dumps(row) + "\n" for row in mixed))
    out = tmp_path / "out.jsonl"
    done = collect(agents, out, tasks=tasks)
    assert done.returncode == 0, done.stderr
    routed = {name: sorted(t for t, _ in agent.seen) for name, agent in agents.agents.items()}
    assert routed == {"math_agent": list(range(0, 30, 3)), "simple_agent": [t for t in range(30) if t % 3]}
    for row in rows(out):
        assert row["agent_ref"]["name"] == ("math_agent" if row["task_index"] % 3 == 0 else "simple_agent")
    listing = json.loads((tmp_path / "out_aggregate_metrics.json").read_text())
    assert sorted(entry["agent_ref"]["name"] for entry in listing) == ["math_agent", "simple_agent"]


def test_agent_name_overrides_the_rows_agent_ref_as_gym_eval_run_does(agents: AgentStack, tmp_path: Path) -> None:
    """NeMo Gym 0.7.0's spelling (``gym eval run --no-serve --agent A -i I -o O``) and routing:
    ``--agent`` sends every row to that agent, saying once which agent_ref it overrode."""
    tasks = tmp_path / "named.jsonl"
    tasks.write_text(
        "".join(json.dumps({**row, "agent_ref": {"name": "math_agent"}}) + "\n" for row in input_rows()[:6])
    )
    out = tmp_path / "out.jsonl"
    done = collect(agents, out, "--no-serve", "--agent", "simple_agent", "--concurrency", "2", tasks=tasks)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if "warning: +agent_name" in line] == [
        "gymbench: warning: +agent_name=simple_agent overrides the rows' agent_ref 'math_agent' "
        "(as NeMo Gym 0.7.0 does; leave +agent_name out to route by agent_ref)"
    ]
    assert sorted(t for t, _ in agents.agents["simple_agent"].seen) == list(range(6))
    assert agents.agents["math_agent"].seen == []
    assert {row["agent_ref"]["name"] for row in rows(out)} == {"simple_agent"}


def nemo_gym_collects(agent_url: str, tasks: list[dict[str, Any]], agent: str) -> list[dict[str, Any]]:
    """What ``ng_collect_rollouts`` writes: each agent's ``/run`` answer with its indices and agent stamped."""
    written = []
    for index, task in enumerate(tasks):
        body = {**task, "_ng_task_index": index, "_ng_rollout_index": 0, "agent_ref": {"name": agent}}
        call = urllib.request.Request(f"{agent_url}/run", json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(call, timeout=30) as answer:
            result = json.loads(answer.read())
        written.append({**result, "_ng_task_index": index, "_ng_rollout_index": 0, "agent_ref": {"name": agent}})
    return written


def test_a_run_nemo_gym_started_is_resumed_and_its_rows_kept(agents: AgentStack, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    theirs = nemo_gym_collects(agents.agent_url("simple_agent"), input_rows()[:10], "simple_agent")
    out.write_text("".join(json.dumps(row) + "\n" for row in theirs))
    before = out.read_text()
    agents.agents["simple_agent"].seen.clear()
    done = collect(agents, out, "+agent_name=simple_agent", "+limit=25", "+resume=true")
    assert done.returncode == 0, done.stderr
    assert sorted(t for t, _ in agents.agents["simple_agent"].seen) == list(range(10, 25))
    assert out.read_text().startswith(before)  # NeMo Gym's rows are kept as they were
    assert sorted(r["_ng_task_index"] for r in rows(out)) == list(range(25))
    [entry] = json.loads((tmp_path / "out_aggregate_metrics.json").read_text())
    assert len(entry["group_level_metrics"]) == 25  # both tools' rows are aggregated together
