"""The closed-loop load generator sends through the built-in ``openai`` backend (issue 38).

A load's requests are the backend's: the body ``collect`` sends for the task, read by the same
parser, counted by the clients' cycles. Nothing here reads a wall clock: only counts and bodies.
"""

from __future__ import annotations

import asyncio

import pytest

from gymbench.calibrate.loadgen import LoadResult, closed_loop, load_backend, load_settings, run_closed_loop
from gymbench.sim import SimServerHandle
from gymbench.testing import make_plugins
from tests.sim.conftest import MODEL
from tests.sim.fake_llama import StepModel, fake_llama_server


@pytest.mark.parametrize("stream", [False, True])
def test_a_load_sends_the_backends_body_and_reads_the_servers_timings(stream: bool) -> None:
    engine = StepModel(slots=2)
    task = {"input": "one two three", "max_output_tokens": 3, "temperature": 0.0}
    with fake_llama_server(engine) as url:
        settings = load_settings(url, "tiny", stream=stream, extra_body={"ignore_eos": True})
        expected = load_backend(settings).request_body(task)

        async def one_load() -> LoadResult:
            async with load_backend(settings) as backend:
                return await closed_loop(backend, task, 2, 0.3, warmup_s=0.0)

        result = asyncio.run(one_load())
    assert result.errors == 0 and result.completed > 0
    assert engine.bodies and all(body == expected for body in engine.bodies)
    assert expected["max_tokens"] == 3 and expected["ignore_eos"] is True
    answers = result.answers
    assert all(a.output_tokens == 3 and a.timings["prompt_n"] > 0 for a in answers)
    assert all((a.ttft is not None) == stream for a in answers)


def test_a_load_on_the_simulator_reads_its_generated_tokens(fast_sim: SimServerHandle) -> None:
    result = run_closed_loop(
        load_settings(fast_sim.base_url, MODEL, max_retries=0),
        {"input": "What is 1 + 1?"},
        2,
        0.5,
        warmup_s=0.1,
        metrics_url=f"{fast_sim.url}/metrics",
        engines=make_plugins().engine_metrics(),
    )
    assert result.errors == 0 and result.completed > 0
    assert result.generated_tokens is not None and result.generated_tokens > 0
    assert all(a.output_tokens for a in result.answers)  # the usage the simulator reports


def test_a_load_over_several_tasks_sends_each_in_turn() -> None:
    """Distinct prompts (issue 39): the server sees every task's body, in turn, not one body again."""
    engine = StepModel(slots=2)
    tasks = [{"input": f"task {i}: one two three", "max_output_tokens": 3} for i in range(3)]
    with fake_llama_server(engine) as url:
        settings = load_settings(url, "tiny", extra_body={"ignore_eos": True})
        expected = [load_backend(settings).request_body(task) for task in tasks]

        async def one_load() -> LoadResult:
            async with load_backend(settings) as backend:
                return await closed_loop(backend, tasks, 1, 0.3, warmup_s=0.0)

        result = asyncio.run(one_load())
    assert result.errors == 0 and len(engine.bodies) >= 3
    assert engine.bodies == [expected[i % 3] for i in range(len(engine.bodies))]  # one client: strictly in turn
