"""NeMo Gym 0.7.0's dispatch: a row goes to the one environment server in front of its agent and
comes back stamped ``_ng_environment_server``/``_ng_result_type``; none or several is an error; a
stack without environment servers (NeMo Gym before 0.7.0) is posted to its agents directly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gymbench import GenerationFailed, GymbenchError
from gymbench.builtin.nemo_gym_head import EnvironmentServer, environment_servers_from_global_config
from gymbench.rollout.dataset import Task
from gymbench.rollout.rows import build_row
from gymbench.sim import SimServerHandle
from tests.collect.test_collect_cli import EXAMPLES, gymbench, rows

from .stack import AgentStack, running_stack
from .test_agent_resolution import backend, request

STAMPS = {"_ng_environment_server": "simple_agent_environment_server", "_ng_result_type": "legacy_agent"}


@pytest.fixture
async def fronted(sim: SimServerHandle) -> Any:
    """Two agents, each behind its ``legacy_agent`` environment server, as ``ng_run`` 0.7.0 starts them."""
    names = ("simple_agent", "math_agent")
    started = await AgentStack(sim.base_url, sim.config.model, names, environment_servers=True).start()
    yield started
    await started.stop()


@pytest.fixture
def fronted_process_stack(sim: SimServerHandle) -> Iterator[AgentStack]:
    with running_stack(sim.base_url, model=sim.config.model, environment_servers=True) as stack:
        yield stack


async def test_rows_go_through_their_agents_environment_server_and_are_stamped_as_nemo_gym_0_7(
    fronted: AgentStack,
) -> None:
    async with backend(fronted.head_port) as agents:
        for task in range(4):
            name = "math_agent" if task % 2 else "simple_agent"
            generation = await agents.generate(request(task, agent_ref={"name": name}))
            assert generation.extra["_ng_environment_server"] == f"{name}_environment_server"
            assert generation.extra["_ng_result_type"] == "legacy_agent"
    assert fronted.environments["simple_agent"].runs == fronted.environments["math_agent"].runs == 2
    assert [t for t, _ in fronted.agents["simple_agent"].seen] == [0, 2]
    assert agents.agent_routes == {name: fronted.agent_url(name) for name in ("simple_agent", "math_agent")}


async def test_a_row_its_environment_server_fails_is_stamped_with_it_too(fronted: AgentStack) -> None:
    """NeMo Gym 0.7.0 stamps the rows of its failures file with the server as well."""
    fronted.environments["simple_agent"].refuse = 400
    async with backend(fronted.head_port) as agents:
        with pytest.raises(GenerationFailed) as failed:
            await agents.generate(request(0, agent_ref={"name": "simple_agent"}))
    assert failed.value.kind == "bad_request" and failed.value.route == STAMPS
    task = Task(0, 0, {"responses_create_params": {"input": "q"}, "_ng_result_type": "stale"})
    row = build_row(task, 0, {"input": "q"}, None, failed.value, None, {}, "exact-match")
    assert row["status"] == "failed" and {key: row[key] for key in STAMPS} == STAMPS


async def test_an_agent_fronted_by_two_environment_servers_is_one_clear_error(fronted: AgentStack) -> None:
    await fronted.add_environment_server("second_environment_server", "simple_agent")
    with pytest.raises(GymbenchError) as info:
        async with backend(fronted.head_port, agent_name="simple_agent"):
            pass
    message = str(info.value)
    assert "several environment servers in front of agent 'simple_agent'" in message
    assert "second_environment_server, simple_agent_environment_server" in message and "\n" not in message
    async with backend(fronted.head_port) as agents:  # routed by agent_ref: that agent's rows fail, others run
        with pytest.raises(GenerationFailed) as failed:
            await agents.generate(request(0, agent_ref={"name": "simple_agent"}))
        await agents.generate(request(1, agent_ref={"name": "math_agent"}))
    assert failed.value.kind == "bad_request" and "several environment servers" in failed.value.reason
    assert fronted.agents["simple_agent"].seen == [] and fronted.agents["math_agent"].seen == [(1, 0)]


async def test_an_agent_no_environment_server_fronts_is_an_error_where_the_stack_has_them(
    fronted: AgentStack,
) -> None:
    fronted.head.fronted["math_agent_environment_server"] = []
    with pytest.raises(GymbenchError) as info:
        async with backend(fronted.head_port, agent_name="math_agent"):
            pass
    assert "no environment server in front of agent 'math_agent'" in str(info.value)
    assert "+agent_url" in str(info.value)


async def test_a_stack_without_environment_servers_is_posted_to_its_agents_unstamped(stack: AgentStack) -> None:
    async with backend(stack.head_port, agent_name="simple_agent") as agents:
        generation = await agents.generate(request())
        await agents.generate(request(1, _ng_environment_server="elsewhere"))  # before 0.7.0: an unknown field
    assert stack.agents["simple_agent"].seen == [(0, 0), (1, 0)]
    assert agents.directory is not None and not agents.directory.environments
    assert not {"_ng_environment_server", "_ng_result_type"} & set(generation.extra)


async def test_agent_url_posts_to_the_server_it_names_unstamped(fronted: AgentStack) -> None:
    async with backend(fronted.head_port, agent_url=fronted.agent_url("simple_agent")) as agents:
        generation = await agents.generate(request())
    assert fronted.environments["simple_agent"].runs == 0 and fronted.agents["simple_agent"].seen == [(0, 0)]
    assert "_ng_environment_server" not in generation.extra


def test_collect_stamps_every_row_and_keeps_an_input_rows_own_correct_stamp(
    fronted_process_stack: AgentStack, tmp_path: Path
) -> None:
    """Rows written by an earlier run (already stamped) are dispatched by their stamp, as NeMo Gym
    0.7.0 does; its result type is rewritten from the server that ran them."""
    stack = fronted_process_stack
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    stamped = {"_ng_environment_server": "simple_agent_environment_server", "_ng_result_type": "stale"}
    lines = EXAMPLES.read_text().splitlines()[:6]
    tasks.write_text("".join(json.dumps({**json.loads(line), **stamped}) + "\n" for line in lines))
    done = gymbench(
        "collect", f"+head_server.port={stack.head_port}", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}",
        "+agent_name=simple_agent", "+num_repeats=2", "+save_results=false", "+progress=false",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = rows(out)
    assert len(written) == 12 and all({k: row[k] for k in STAMPS} == STAMPS for row in written)
    assert stack.environments["simple_agent"].runs == 12 == len(stack.agents["simple_agent"].seen)


async def test_a_row_naming_its_environment_server_goes_there_and_an_unknown_one_fails(fronted: AgentStack) -> None:
    """0.7.0 dispatches a row that carries ``_ng_environment_server`` to that server, whatever its
    agent_ref, and refuses a server its config lacks; a stack without environment servers ignores it."""
    async with backend(fronted.head_port) as agents:
        row = {"agent_ref": {"name": "simple_agent"}, "_ng_environment_server": "math_agent_environment_server"}
        generation = await agents.generate(request(0, **row))
        with pytest.raises(GenerationFailed) as failed:
            await agents.generate(request(1, agent_ref={"name": "simple_agent"}, _ng_environment_server="elsewhere"))
    assert generation.extra["_ng_environment_server"] == "math_agent_environment_server"
    assert fronted.environments["math_agent"].runs == 1 and fronted.environments["simple_agent"].runs == 0
    assert failed.value.kind == "bad_request" and "'elsewhere'" in failed.value.reason
    assert "does not list" in failed.value.reason and fronted.agents["simple_agent"].seen == []


def test_collect_with_an_ambiguous_agent_is_one_line_and_a_non_zero_exit(
    fronted_process_stack: AgentStack, tmp_path: Path
) -> None:
    stack = fronted_process_stack
    stack.head.fronted["simple_agent_environment_server"].append("simple_agent")  # listed twice: as 0.7.0 counts
    out = tmp_path / "out.jsonl"
    done = gymbench(
        "collect", f"+head_server.port={stack.head_port}", f"+input_jsonl_fpath={EXAMPLES}",
        f"+output_jsonl_fpath={out}", "+agent_name=simple_agent", "+limit=2", "+save_results=false", "+progress=false",
    )  # fmt: skip
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if "several environment servers" in line]
    assert len(errors) == 1 and "'simple_agent'" in errors[0], done.stderr
    assert stack.environments["simple_agent"].runs == 0 and not (out.exists() and out.read_text())


def test_the_config_is_read_as_nemo_gym_0_7_reads_it() -> None:
    """``environment_server_agent_refs``: a field typed ``responses_api_agents``, or ``agent_server``
    without a type; the result type is the block's first implementation; the listing's address wins."""
    head = "http://10.0.0.5:11000"
    agent, model = "responses_api_agents", "responses_api_models"
    config = {
        "env_a": {"environment_servers": {"legacy_agent": {"host": "0.0.0.0", "port": 7001, "agent_server": {
            "name": "a"}}}},
        "env_duo": {"environment_servers": {"duo": {
            "host": "10.0.0.9", "port": 7002, "agent_server": {"type": agent, "name": "assistant"},
            "user": {"type": agent, "name": "user"}, "judge": {"type": model, "name": "m"},
        }}},
        "env_unlisted": {"environment_servers": {"legacy_agent": {"agent_server": {"name": "b"}}}},
        "a": {"responses_api_agents": {"simple_agent": {"host": "127.0.0.1", "port": 7003}}},
    }  # fmt: skip
    environments, fronting = environment_servers_from_global_config(config, head, {"env_unlisted": "http://h:7004/"})
    assert environments == {
        "env_a": EnvironmentServer("env_a", "http://10.0.0.5:7001", "legacy_agent"),
        "env_duo": EnvironmentServer("env_duo", "http://10.0.0.9:7002", "duo"),
        "env_unlisted": EnvironmentServer("env_unlisted", "http://h:7004", "legacy_agent"),
    }
    assert fronting == {"a": ("env_a",), "assistant": ("env_duo",), "user": ("env_duo",), "b": ("env_unlisted",)}


async def test_legacy_routing_sends_every_row_to_the_named_environment_server_stamped_with_it(
    fronted: AgentStack,
) -> None:
    """0.7.0's ``environment_routing_mode=legacy``: every flat row to ``environment_server_name``,
    whatever its agent_ref or its own stamp."""
    legacy = {"environment_routing_mode": "legacy", "environment_server_name": "math_agent_environment_server"}
    async with backend(fronted.head_port, **legacy) as agents:
        for task, row in enumerate(({"agent_ref": {"name": "simple_agent"}}, {"agent_ref": {"name": "math_agent"}},
                                    {"_ng_environment_server": "simple_agent_environment_server"})):  # fmt: skip
            generation = await agents.generate(request(task, **row))
            assert generation.extra["_ng_environment_server"] == "math_agent_environment_server"
    assert fronted.environments["math_agent"].runs == 3 and fronted.environments["simple_agent"].runs == 0
    with pytest.raises(GymbenchError, match="'elsewhere'.*does not list"):
        async with backend(fronted.head_port, environment_routing_mode="legacy", environment_server_name="elsewhere"):
            pass


async def test_legacy_routing_on_a_stack_without_environment_servers_is_one_clear_error(stack: AgentStack) -> None:
    with pytest.raises(GymbenchError, match="lists no environment servers") as info:
        async with backend(stack.head_port, environment_routing_mode="legacy", environment_server_name="env"):
            pass
    assert "\n" not in str(info.value) and stack.agents["simple_agent"].seen == []


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"environment_routing_mode": "taskset"}, "materialized tasks"),
        ({"environment_routing_mode": "legacy"}, "name it with .environment_server_name=NAME"),
        ({"environment_routing_mode": "agnet"}, "environment_routing_mode"),
        ({"environment_routing_mode": "legacy", "environment_server_name": "e", "agent_url": "http://h:1"}, "agent_"),
    ],
)
def test_routing_settings_nemo_gym_refuses_are_refused_in_one_line(settings: dict[str, Any], said: str) -> None:
    with pytest.raises(GymbenchError, match=said) as info:
        backend(11000, **settings)
    assert "\n" not in str(info.value)


def test_materialized_task_routes_are_one_line_on_the_command_line(tmp_path: Path) -> None:
    done = gymbench("collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={tmp_path / 'o.jsonl'}",
                    "+agent_name=a", "+environment_server_routes={t: env}")  # fmt: skip
    assert done.returncode == 2 and "materialized tasks" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "o.jsonl").exists()
