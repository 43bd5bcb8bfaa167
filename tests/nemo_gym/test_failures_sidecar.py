"""NeMo Gym 0.7.0's failures sidecar: a run through its agents writes failed rollouts to
``<stem>_failures.jsonl`` (one row per failed attempt, ``_ng_failure_class`` set) and only scored
ones to the output; a resume runs again every pair the output lacks. Other backends keep failed
rows in the output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymbench.collect.collection import collect_settings
from gymbench.collect.config import CollectConfig
from gymbench.settings import build_settings
from gymbench.sim import SimServerHandle
from tests.collect.test_collect_cli import EXAMPLES, gymbench, rows

from .stack import AgentStack, running_stack

SIDECAR_STAMPS = {"_ng_environment_server": "simple_agent_environment_server", "_ng_result_type": "legacy_agent"}


@pytest.fixture
def two_agents(sim: SimServerHandle) -> Iterator[AgentStack]:
    names = ("simple_agent", "math_agent")
    with running_stack(sim.base_url, model=sim.config.model, agent_names=names, environment_servers=True) as stack:
        yield stack


def tasks_for_two_agents(path: Path) -> Path:
    """Four tasks: the even ones for ``simple_agent``, the odd ones for ``math_agent``."""
    lines = EXAMPLES.read_text().splitlines()[:4]
    agents = ("simple_agent", "math_agent")
    path.write_text(
        "".join(
            json.dumps({**json.loads(line), "agent_ref": {"name": agents[i % 2]}}) + "\n"
            for i, line in enumerate(lines)
        )
    )
    return path


def collect_settings_for(stack: AgentStack, tmp_path: Path) -> tuple[Path, Path, tuple[str, ...]]:
    """The output, its sidecar and the collect settings over the two agents' four tasks."""
    tasks, out = tasks_for_two_agents(tmp_path / "tasks.jsonl"), tmp_path / "out.jsonl"
    settings = (f"+head_server.port={stack.head_port}", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}",
                "+save_results=false", "+progress=false")  # fmt: skip
    return out, tmp_path / "out_failures.jsonl", settings


def test_failed_rollouts_go_to_the_sidecar_and_a_resume_reruns_exactly_them(
    two_agents: AgentStack, tmp_path: Path
) -> None:
    stack = two_agents
    out, sidecar, base = collect_settings_for(stack, tmp_path)

    def collect(*settings: str) -> None:
        gymbench("collect", *base, *settings)

    stack.environments["simple_agent"].refuse = 400
    collect()
    assert [(r["_ng_task_index"], r["status"]) for r in sorted(rows(out), key=lambda r: r["task_index"])] == [
        (1, "ok"),
        (3, "ok"),
    ]
    failed = rows(sidecar)
    assert sorted(r["_ng_task_index"] for r in failed) == [0, 2]
    for row in failed:
        assert row["_ng_failure_class"] == "bad_request" and "refused by the test" in row["_ng_failure_message"]
        assert row["agent_ref"] == {"name": "simple_agent"} and row["_ng_rollout_index"] == 0
        assert {key: row[key] for key in SIDECAR_STAMPS} == SIDECAR_STAMPS and row["attempt"] == 1

    collect("+resume=true")  # still refused: the sidecar is appended with the second attempts
    assert [r["attempt"] for r in rows(sidecar)] == [1, 1, 2, 2] and len(rows(out)) == 2

    stack.environments["simple_agent"].refuse = None
    math_runs = stack.environments["math_agent"].runs
    simple_runs = stack.environments["simple_agent"].runs
    collect("+resume=true")
    assert stack.environments["math_agent"].runs == math_runs  # the output's pairs are not run again
    assert stack.environments["simple_agent"].runs == simple_runs + 2  # exactly the failed pairs
    assert sorted((r["task_index"], r["status"], r["attempt"]) for r in rows(out)) == [
        (0, "ok", 3), (1, "ok", 1), (2, "ok", 3), (3, "ok", 1),
    ]  # fmt: skip
    assert len(rows(sidecar)) == 4  # the failed attempts stay, as NeMo Gym keeps them


def test_a_fresh_run_refuses_an_earlier_sidecar_and_overwrite_removes_it(
    two_agents: AgentStack, tmp_path: Path
) -> None:
    stack = two_agents
    out, sidecar, settings = collect_settings_for(stack, tmp_path)
    sidecar.write_text('{"_ng_task_index": 0, "_ng_rollout_index": 0, "_ng_failure_class": "bad_request"}\n')
    refused = gymbench("collect", *settings)
    assert refused.returncode != 0 and f"{sidecar}: output file already exists" in refused.stderr
    assert stack.environments["simple_agent"].runs == 0
    done = gymbench("collect", *settings, "+overwrite=true")
    assert done.returncode == 0, done.stderr
    assert len(rows(out)) == 4 and not sidecar.exists()  # the earlier failures are gone; none failed, no file


@pytest.mark.parametrize(
    ("dotlist", "sidecar"),
    [
        (["agent_name=simple_agent"], True),
        (["backend=nemo-gym", "agent_url=http://127.0.0.1:9"], True),
        (["backend=openai", "base_url=http://127.0.0.1:9"], False),
        ([], False),  # the simulator stands in for an OpenAI-compatible server
    ],
)
def test_only_runs_through_nemo_gym_agents_write_the_sidecar(dotlist: list[str], sidecar: bool, tmp_path: Path) -> None:
    files = [f"input_jsonl_fpath={EXAMPLES}", f"output_jsonl_fpath={tmp_path / 'out.jsonl'}"]
    settings = collect_settings(build_settings(CollectConfig, [*files, *dotlist]))
    assert settings.failures_apart is sidecar
    assert settings.failures_path == (tmp_path / "out_failures.jsonl" if sidecar else None)


@pytest.mark.parametrize("setting", ["+num_workers=2", "+failures_sidecar=false"])
def test_sharded_runs_and_failures_sidecar_false_keep_failed_rows_in_the_output(
    two_agents: AgentStack, setting: str, tmp_path: Path
) -> None:
    """The shards' merge checks that every pair is in the shards' files, so a sharded run keeps its
    failed rows there (status failed), as ``+failures_sidecar=false`` does in one process."""
    stack = two_agents
    out, sidecar, settings = collect_settings_for(stack, tmp_path)
    stack.environments["simple_agent"].refuse = 400
    gymbench("collect", *settings, setting)
    written = sorted((r["task_index"], r["status"]) for r in rows(out))
    assert written == [(0, "failed"), (1, "ok"), (2, "failed"), (3, "ok")]
    assert not sidecar.exists()
