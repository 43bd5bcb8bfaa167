"""The simulated server against its own formula, and what it costs to run.

Faithfulness: closed-loop clients at concurrencies below, at and above the saturation point the
formula gives. Output lengths are drawn uniformly (mean 32) so clients do not finish in lockstep,
as in real traffic; output tokens/s is read from the server's own counter over the window, which
whole requests finishing at once cannot quantise. Measured ÷ predicted should be ≈ 1.
Cost: the server process's CPU seconds per request on the zero-latency preset, which bounds the
request rate its one core sustains; and what tool definitions and logprobs add to it, plain and
"rich" requests alternated window by window against one server, medians compared. A cost window
is a number of requests, not of seconds: it waits for its work however busy the machine is, and
the server's CPU is read once every request it counts has been answered.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import psutil
import pytest

from gymbench import Recorder
from gymbench.calibrate.loadgen import load_backend, load_settings, run_closed_loop
from gymbench.sim import SimServerHandle, config_from_preset, describe, running_sim_server
from gymbench.sim.text import count_tokens
from gymbench.testing import make_plugins
from gymbench.types import GenerationRequest

FAITHFUL = {"output_tokens_dist": "uniform"}
TASK = {"input": "What is 1 + 1?"}
"""Every load's task (``responses_create_params``), sent by the ``openai`` backend as ``collect`` sends it."""
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city"],
}


@dataclass(frozen=True)
class Workload:
    """A task and how the backend asks for it (the API, and what the body gets beside the task)."""

    api: str
    params: dict[str, Any]
    extra_body: dict[str, Any] = field(default_factory=dict)


RICH = {  # one tool offered (called half the time, as tool_choice auto and the default rate have it), 5 logprobs
    "chat": Workload(
        "chat",
        {
            **TASK,
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}],
            "logprobs": True,
        },
        {"top_logprobs": 5},
    ),  # fmt: skip
    "responses": Workload(
        "responses",
        {
            **TASK,
            "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER}],
            "include": ["message.output_text.logprobs"],
            "top_logprobs": 5,
        },
    ),  # fmt: skip
}


@pytest.fixture(scope="module")
def vllm_like() -> SimServerHandle:
    with running_sim_server(preset="vllm-like", **FAITHFUL) as server:
        yield server


@pytest.mark.parametrize("concurrency", [4, 16, 32, 64, 96, 128])
def test_faithfulness(gymbench: Recorder, vllm_like: SimServerHandle, concurrency: int) -> None:
    config = config_from_preset("vllm-like", FAITHFUL)
    capacity = describe(config, prompt_tokens=count_tokens("What is 1 + 1?"))
    predicted = capacity.throughput_at(config, concurrency) * capacity.output_tokens
    duration = 2.0 if gymbench.quick else 10.0
    result = run_closed_loop(
        load_settings(vllm_like.base_url, "gymbench-sim", max_retries=0),
        TASK,
        concurrency,
        duration,
        warmup_s=1.5,
        metrics_url=f"{vllm_like.url}/metrics",
        engines=make_plugins().engine_metrics(),
    )
    assert result.errors == 0 and result.output_tokens_per_s is not None
    gymbench.record("output_tokens_per_s", result.output_tokens_per_s, "tok/s", "higher")
    gymbench.record("predicted_output_tokens_per_s", predicted, "tok/s", "higher")
    gymbench.record("measured_over_predicted", result.output_tokens_per_s / predicted, "ratio", "higher")
    gymbench.record("requests_per_s", result.requests_per_s, "req/s", "higher")
    gymbench.record("latency", result.latencies_s, "s", "lower")
    gymbench.extra.update(saturation_concurrency=capacity.saturation_concurrency)


@pytest.mark.parametrize("stream", [False, True])
def test_simulator_cpu_per_request(gymbench: Recorder, stream: bool) -> None:
    """Server CPU per request at zero latency; 1/that is the rate that saturates its one core."""
    plain, requests = Workload("chat", TASK), 1000 if gymbench.quick else 4000
    with running_sim_server(preset="zero-latency") as server:
        send_requests(server.base_url, plain, stream, 500)  # warm-up
        started = time.perf_counter()
        per_request = server_cpu_per_request(server, plain, stream, requests)
        window_s = time.perf_counter() - started
    gymbench.record("server_cpu_per_request", per_request * 1e6, "µs", "lower")
    gymbench.record("one_core_saturation_rate", 1 / per_request, "req/s", "higher")
    gymbench.record("achieved_requests_per_s", requests / window_s, "req/s", "higher")
    gymbench.record("server_cpu_utilisation", per_request * requests / window_s, "cores", "lower")


def send_requests(base_url: str, workload: Workload, stream: bool, requests: int, clients: int = 32) -> None:
    """``clients`` closed-loop clients until ``requests`` have been answered, each with a 200: the
    ``openai`` backend's requests (no retries: a failure ends the bench with its reason)."""
    settings = load_settings(base_url, "gymbench-sim", api=workload.api, stream=stream,
                             extra_body=workload.extra_body, max_retries=0)  # fmt: skip

    async def main() -> int:
        left = iter(range(requests))
        async with load_backend(settings) as backend:

            async def client() -> int:
                answered = 0
                for index in left:
                    await backend.generate(GenerationRequest(index, 0, workload.params))
                    answered += 1
                return answered

            return sum(await asyncio.gather(*(client() for _ in range(clients))))

    assert asyncio.run(main()) == requests


def server_cpu_per_request(server: SimServerHandle, workload: Workload, stream: bool, requests: int) -> float:
    """Server CPU seconds per request over a window of ``requests`` requests from 32 clients."""
    process = psutil.Process(server.process.pid)
    before = process.cpu_times()
    send_requests(server.base_url, workload, stream, requests)
    after = process.cpu_times()
    return ((after.user - before.user) + (after.system - before.system)) / requests


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_simulator_cpu_with_tools_and_logprobs(gymbench: Recorder, api: str, stream: bool) -> None:
    """Plain requests against requests offering a tool and asking for 5 logprobs, alternated."""
    workloads = {"plain": Workload(api, TASK), "rich": RICH[api]}
    rounds, requests = (2, 500) if gymbench.quick else (7, 2000)
    seen: dict[str, list[float]] = {"plain": [], "rich": []}
    with running_sim_server(preset="zero-latency") as server:
        for workload in workloads.values():
            send_requests(server.base_url, workload, stream, 300)  # warm-up
        for _ in range(rounds):
            for name, workload in workloads.items():
                seen[name].append(server_cpu_per_request(server, workload, stream, requests) * 1e6)
    gymbench.record("plain_server_cpu_per_request", seen["plain"], "µs", "lower")
    gymbench.record("rich_server_cpu_per_request", seen["rich"], "µs", "lower")
    ratio = statistics.median(seen["rich"]) / statistics.median(seen["plain"])
    gymbench.record("rich_over_plain_cpu", ratio, "ratio", "lower")
