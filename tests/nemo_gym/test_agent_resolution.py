"""Agents found by name through the head server, as ``ng_collect_rollouts`` finds them, or a clear error."""

from __future__ import annotations

from typing import Any

import pytest

from gymbench import GenerationFailed, GenerationRequest, GymbenchError
from gymbench.builtin.backend_settings import NemoGymSettings
from gymbench.builtin.nemo_gym_backend import NemoGymBackend
from gymbench.builtin.nemo_gym_head import agents_from_global_config, agents_from_instances
from gymbench.sim import SimServerHandle

from .stack import AgentStack, instance

QUESTION = {"input": [{"role": "user", "content": "What is 6 * 7?"}]}


def request(task: int = 0, **row: Any) -> GenerationRequest:
    full = {"responses_create_params": QUESTION, "expected_answer": "42", **row}
    return GenerationRequest(task, 0, QUESTION, full)


def backend(head_port: int, **settings: Any) -> NemoGymBackend:
    return NemoGymBackend(NemoGymSettings(head_server={"port": head_port}, backoff_base_s=0.001, **settings))


async def test_an_agent_name_is_found_through_the_head_servers_listing(stack: AgentStack) -> None:
    async with backend(stack.head_port, agent_name="math_agent") as agents:
        generation = await agents.generate(request())
    assert generation.reward in (0.0, 1.0)
    assert agents.agent_routes == {"math_agent": stack.agent_url("math_agent")}
    assert stack.agents["math_agent"].seen == [(0, 0)] and stack.agents["simple_agent"].seen == []
    assert stack.resources["math_agent"].verified == 1


async def test_an_unknown_name_is_an_error_listing_the_names_the_head_server_knows(stack: AgentStack) -> None:
    with pytest.raises(GymbenchError) as info:
        async with backend(stack.head_port, agent_name="simple_agnet"):
            pass
    message = str(info.value)
    assert "knows no agent named 'simple_agnet'" in message and stack.head_url in message
    assert "the agents it knows: math_agent, simple_agent." in message  # resources servers are not agents
    assert "+agent_name" in message and "+agent_url" in message


async def test_an_unreachable_head_server_is_an_error_that_says_how_to_point_at_one(dead_port: int) -> None:
    with pytest.raises(GymbenchError) as info:
        async with backend(dead_port, agent_name="simple_agent"):
            pass
    message = str(info.value)
    assert f"cannot reach the NeMo Gym head server at http://127.0.0.1:{dead_port}/server_instances" in message
    assert "+head_server.host/+head_server.port" in message and "+agent_url" in message


async def test_a_head_server_without_the_listing_is_read_through_its_config(sim: SimServerHandle) -> None:
    """Head servers of NeMo Gym 0.1 answer 404 at /server_instances; their config names the agents."""
    stack = await AgentStack(sim.base_url, sim.config.model, ("simple_agent",), legacy_head=True).start()
    try:
        async with backend(stack.head_port, agent_name="simple_agent") as agents:
            await agents.generate(request())
        assert agents.agent_routes == {"simple_agent": stack.agent_url("simple_agent")}
    finally:
        await stack.stop()


async def test_a_listed_agent_that_is_not_running_fails_the_run_before_any_row(
    stack: AgentStack, dead_port: int
) -> None:
    stack.head.instances.append(instance("crashed_agent", "responses_api_agents", "simple_agent", dead_port))
    with pytest.raises(GymbenchError) as info:
        async with backend(stack.head_port, agent_name="crashed_agent"):
            pass
    assert f"cannot reach the agent server at http://127.0.0.1:{dead_port} after 3 tries" in str(info.value)


async def test_rows_route_by_their_agent_ref_when_no_agent_name_is_given(stack: AgentStack) -> None:
    async with backend(stack.head_port) as agents:
        for task in range(6):
            name = "math_agent" if task % 3 == 0 else "simple_agent"
            generation = await agents.generate(request(task, agent_ref={"name": name}))
            assert generation.extra["agent_ref"] == {"name": name}
    assert [t for t, _ in stack.agents["math_agent"].seen] == [0, 3]
    assert [t for t, _ in stack.agents["simple_agent"].seen] == [1, 2, 4, 5]
    assert set(agents.agent_routes) == {"simple_agent", "math_agent"}


async def test_agent_name_overrides_every_rows_agent_ref_with_one_warning_per_name_as_nemo_gym_0_7(
    stack: AgentStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """NeMo Gym 0.7.0: ``+agent_name`` is ``agent_map._default`` and wins over a row's own agent_ref
    (0.5.1 let the row win); a row naming an agent the head server does not know runs too."""
    async with backend(stack.head_port, agent_name="simple_agent") as agents:
        for task in range(6):
            ref = {"agent_ref": {"name": "math_agent" if task % 2 else "ghost"}} if task % 3 else {}
            generation = await agents.generate(request(task, **ref))
            assert generation.extra["agent_ref"] == {"name": "simple_agent"}
    assert [t for t, _ in stack.agents["simple_agent"].seen] == [0, 1, 2, 3, 4, 5]
    assert stack.agents["math_agent"].seen == []
    warnings = [line for line in capsys.readouterr().err.splitlines() if "overrides" in line]
    assert len(warnings) == 2 and {"'math_agent'" in w or "'ghost'" in w for w in warnings} == {True}


async def test_a_row_naming_no_known_agent_fails_alone_and_clearly(stack: AgentStack) -> None:
    async with backend(stack.head_port) as agents:  # no +agent_name: every row must name its agent
        with pytest.raises(GenerationFailed) as unnamed:
            await agents.generate(request())
        with pytest.raises(GenerationFailed) as unknown:
            await agents.generate(request(agent_ref={"name": "ghost"}))
        await agents.generate(request(agent_ref={"name": "simple_agent"}))
    assert unnamed.value.kind == "bad_request" and "no agent_ref and +agent_name is not set" in unnamed.value.reason
    assert "knows no agent named 'ghost'" in unknown.value.reason
    assert stack.agents["simple_agent"].seen == [(0, 0)]


async def test_an_agent_first_named_by_a_row_is_checked_once_and_its_rows_fail_fast(
    stack: AgentStack, dead_port: int
) -> None:
    stack.head.instances.append(instance("crashed_agent", "responses_api_agents", "simple_agent", dead_port))
    async with backend(stack.head_port) as agents:
        failures = []
        for task in range(3):
            with pytest.raises(GenerationFailed) as info:
                await agents.generate(request(task, agent_ref={"name": "crashed_agent"}))
            failures.append(info.value)
        await agents.generate(request(9, agent_ref={"name": "simple_agent"}))
    assert {f.kind for f in failures} == {"connection_error"} and all(f.retries == 0 for f in failures)
    assert all("cannot reach the agent server" in f.reason for f in failures)
    assert stack.agents["simple_agent"].seen == [(9, 0)]


async def test_each_agent_server_is_checked_once_however_many_rows_it_takes(stack: AgentStack) -> None:
    async with backend(stack.head_port) as agents:
        for task in range(4):
            await agents.generate(request(task, agent_ref={"name": "math_agent"}))
            await agents.generate(request(task, agent_ref={"name": "simple_agent"}))
    assert stack.agents["math_agent"].liveness_checks == 1 and stack.agents["simple_agent"].liveness_checks == 1
    assert len(stack.agents["math_agent"].seen) == len(stack.agents["simple_agent"].seen) == 4


def test_listings_name_agents_by_process_name_and_bind_all_addresses_to_the_head_host() -> None:
    head = "http://10.0.0.5:11000"
    listing = [
        {**instance("a", "responses_api_agents", "simple_agent", 7001), "host": "0.0.0.0"},
        instance("a_resources", "resources_servers", "x", 7002),
        {"server_type": "responses_api_agents", "process_name": "b", "host": "10.0.0.9", "port": 7003},
        "not an entry",
    ]
    assert agents_from_instances(listing, head) == {"a": "http://10.0.0.5:7001", "b": "http://10.0.0.9:7003"}
    config = {
        "a": {"responses_api_agents": {"simple_agent": {"host": "127.0.0.1", "port": 7001, "entrypoint": "app.py"}}},
        "m": {"responses_api_models": {"vllm_model": {"host": "127.0.0.1", "port": 7004}}},
        "head_server": {"host": "127.0.0.1", "port": 11000},
    }
    assert agents_from_global_config(config, head) == {"a": "http://127.0.0.1:7001"}
