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
from typing import Any

import aiohttp
import psutil
import pytest

from gymbench import Recorder
from gymbench.sim import SimServerHandle, config_from_preset, describe, running_sim_server
from gymbench.sim.loadgen import run_closed_loop
from gymbench.sim.text import count_tokens

FAITHFUL = {"output_tokens_dist": "uniform"}
BODY = {"model": "gymbench-sim", "messages": [{"role": "user", "content": "What is 1 + 1?"}]}
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city"],
}
PLAIN = {
    "chat": ("/chat/completions", BODY),
    "responses": ("/responses", {"model": "gymbench-sim", "input": "What is 1 + 1?"}),
}
RICH = {  # one tool offered (called half the time, as tool_choice auto and the default rate have it), 5 logprobs
    "chat": {
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}],
        "logprobs": True,
        "top_logprobs": 5,
    },
    "responses": {
        "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER}],
        "include": ["message.output_text.logprobs"],
        "top_logprobs": 5,
    },
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
        vllm_like.base_url,
        concurrency,
        duration,
        warmup_s=1.5,
        body=BODY,
        metrics_url=f"{vllm_like.url}/metrics",
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
    body, requests = {**BODY, "stream": stream}, 1000 if gymbench.quick else 4000
    with running_sim_server(preset="zero-latency") as server:
        send_requests(server.base_url, "/chat/completions", body, 500)  # warm-up
        started = time.perf_counter()
        per_request = server_cpu_per_request(server, "/chat/completions", body, requests)
        window_s = time.perf_counter() - started
    gymbench.record("server_cpu_per_request", per_request * 1e6, "µs", "lower")
    gymbench.record("one_core_saturation_rate", 1 / per_request, "req/s", "higher")
    gymbench.record("achieved_requests_per_s", requests / window_s, "req/s", "higher")
    gymbench.record("server_cpu_utilisation", per_request * requests / window_s, "cores", "lower")


def send_requests(base_url: str, path: str, body: dict[str, Any], requests: int, clients: int = 32) -> None:
    """``clients`` closed-loop clients until ``requests`` have been answered, each with a 200."""

    async def main() -> list[int]:
        left = iter(range(requests))
        statuses: list[int] = []
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def client() -> None:
                for _ in left:
                    async with session.post(base_url + path, json=body) as answer:
                        await answer.read()
                        statuses.append(answer.status)

            await asyncio.gather(*(client() for _ in range(clients)))
        return statuses

    statuses = asyncio.run(main())
    assert len(statuses) == requests and set(statuses) == {200}, sorted(set(statuses))


def server_cpu_per_request(server: SimServerHandle, path: str, body: dict[str, Any], requests: int) -> float:
    """Server CPU seconds per request over a window of ``requests`` requests from 32 clients."""
    process = psutil.Process(server.process.pid)
    before = process.cpu_times()
    send_requests(server.base_url, path, body, requests)
    after = process.cpu_times()
    return ((after.user - before.user) + (after.system - before.system)) / requests


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_simulator_cpu_with_tools_and_logprobs(gymbench: Recorder, api: str, stream: bool) -> None:
    """Plain requests against requests offering a tool and asking for 5 logprobs, alternated."""
    path, plain = PLAIN[api]
    bodies = {"plain": {**plain, "stream": stream}, "rich": {**plain, **RICH[api], "stream": stream}}
    rounds, requests = (2, 500) if gymbench.quick else (7, 2000)
    seen: dict[str, list[float]] = {"plain": [], "rich": []}
    with running_sim_server(preset="zero-latency") as server:
        for body in bodies.values():
            send_requests(server.base_url, path, body, 300)  # warm-up
        for _ in range(rounds):
            for name, body in bodies.items():
                seen[name].append(server_cpu_per_request(server, path, body, requests) * 1e6)
    gymbench.record("plain_server_cpu_per_request", seen["plain"], "µs", "lower")
    gymbench.record("rich_server_cpu_per_request", seen["rich"], "µs", "lower")
    ratio = statistics.median(seen["rich"]) / statistics.median(seen["plain"])
    gymbench.record("rich_over_plain_cpu", ratio, "ratio", "lower")
