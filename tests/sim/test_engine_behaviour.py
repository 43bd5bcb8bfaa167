"""Continuous batching, queue and rate limits, warm-up and collapse: exact, in simulated time.

The engine is driven through :class:`~gymbench.sim.InProcessBackend` on a simulated-time loop, so
"all twelve requests arrive before the first finishes" is true by construction, not by hoping the
machine is idle. The real server is checked over HTTP below for what does not depend on timing:
status codes, headers, error shapes, fault counts and seeded answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import pytest

from gymbench.errors import GymbenchError
from gymbench.sim import InProcessBackend, SimConfig, SimServerHandle, describe, run_in_simulated_time
from gymbench.sim.capacity import step_time
from gymbench.sim.text import count_tokens
from gymbench.types import Generation, GenerationFailed, GenerationRequest

from .conftest import FAST, MODEL

T = TypeVar("T")
Outcome = Generation | GenerationFailed

# --------------------------------------------------------------------------- simulated time


def ask(index: int = 0, content: str | None = None, **params: Any) -> GenerationRequest:
    return GenerationRequest(index, 0, {"input": [{"role": "user", "content": content or f"q{index}"}], **params})


def simulate(config: SimConfig, scenario: Callable[[InProcessBackend], Awaitable[T]]) -> tuple[T, InProcessBackend]:
    """``scenario(backend)`` in simulated time against an in-process engine; its result and the backend."""
    backend = InProcessBackend(config)

    async def main() -> T:
        async with backend:
            return await scenario(backend)

    return run_in_simulated_time(main()), backend


async def burst(backend: InProcessBackend, count: int, **params: Any) -> list[Outcome]:
    """``count`` requests sent at the same instant; each one's generation or failure."""
    return await asyncio.gather(*(backend.generate(ask(i, **params)) for i in range(count)), return_exceptions=True)


def engine(**settings: Any) -> SimConfig:
    """An engine whose step costs only ``step_base_s``: latencies are whole numbers of steps."""
    return SimConfig(**{"step_per_seq_s": 0.0, "prefill_per_token_s": 0.0, **settings})


def kinds(outcomes: list[Outcome]) -> list[str]:
    return sorted("ok" if isinstance(o, Generation) else o.kind for o in outcomes)


def now() -> float:
    return asyncio.get_running_loop().time()


def test_never_more_than_max_num_seqs_running() -> None:
    config = engine(max_num_seqs=5, step_base_s=0.005, output_tokens_mean=10)

    async def scenario(backend: InProcessBackend) -> tuple[list[Outcome], list[int], float]:
        running: list[int] = []

        async def sample() -> None:
            while True:
                running.append(len(backend.service.engine.running))
                await asyncio.sleep(0.001)

        sampler = asyncio.ensure_future(sample())
        outcomes = await burst(backend, 40)
        sampler.cancel()
        return outcomes, running, now()

    (outcomes, running, finished), backend = simulate(config, scenario)
    assert kinds(outcomes) == ["ok"] * 40
    assert max(running) == 5 and len(running) > 300
    assert finished == pytest.approx(0.4, abs=1e-9)  # 8 batches of 5, 10 steps of 5 ms each
    metrics = backend.service.metrics.values()
    assert metrics["gymbench_sim:num_requests_running_peak"] == 5
    assert metrics["vllm:generation_tokens_total"] == 400
    assert metrics['vllm:request_success_total{finished_reason="stop"}'] == 40


def test_waiting_requests_are_visible_in_metrics() -> None:
    config = engine(max_num_seqs=2, step_base_s=0.01, output_tokens_mean=20)

    async def scenario(backend: InProcessBackend) -> dict[str, float]:
        sent = asyncio.ensure_future(burst(backend, 10))
        await asyncio.sleep(0.1)  # halfway through the first pair's 20 steps
        metrics = backend.service.metrics.values()
        await sent
        return metrics

    metrics, _ = simulate(config, scenario)
    assert metrics["vllm:num_requests_waiting"] == 8
    assert metrics["vllm:num_requests_running"] == 2


def test_a_full_queue_admits_exactly_max_num_seqs_plus_max_waiting() -> None:
    config = SimConfig(max_num_seqs=2, max_waiting=3, step_base_s=0.01, output_tokens_mean=10)
    outcomes, backend = simulate(config, lambda backend: burst(backend, 12))
    assert kinds(outcomes) == ["ok"] * 5 + ["rate_limited"] * 7  # 2 running + 3 waiting
    refused = [o for o in outcomes if isinstance(o, GenerationFailed)]
    assert all(o.status == 429 and "waiting queue is full" in o.reason for o in refused)
    assert backend.service.metrics.values()['gymbench_sim:requests_rejected_total{reason="queue_full"}'] == 7


@pytest.mark.parametrize("clients", [1, 8, 32, 64, 128])
def test_closed_loop_throughput_is_the_capacity_formula(clients: int) -> None:
    """Below saturation, a simulated client resubmits the instant its last token is out and its
    prefill starts in the very next step, so the formula's average half-step admission wait (real
    clients return at random phases of a step) is absent: X(n) = n / (L_out · T(n)). At and well
    past saturation it is X_max. (Just past it, with a client or two to spare, a slot now and then
    idles for a step: 65 clients get 1% less.)"""
    config = SimConfig()  # the vllm-like engine: 64 sequences, 32 output tokens
    question = "What is 1 + 1?"
    capacity = describe(config, prompt_tokens=count_tokens(question))
    window_s = 20.0

    async def scenario(backend: InProcessBackend) -> float:
        async def client() -> None:
            while True:
                await backend.generate(ask(content=question))

        running = [asyncio.ensure_future(client()) for _ in range(clients)]
        await asyncio.sleep(2.0)  # ramp-up
        before = backend.service.engine.stats.generation_tokens
        await asyncio.sleep(window_s)
        generated = backend.service.engine.stats.generation_tokens - before
        for task in running:
            task.cancel()
        return generated / window_s / capacity.output_tokens

    measured, _ = simulate(config, scenario)
    if clients >= capacity.saturation_concurrency:
        expected = capacity.max_requests_per_s
    else:
        expected = clients / (capacity.output_tokens * step_time(config, clients, capacity.prompt_tokens, 32))
    assert measured == pytest.approx(expected, rel=0.005)


def test_kv_cache_limits_the_running_batch() -> None:
    config = engine(max_num_seqs=10, kv_cache_tokens=30, step_base_s=0.005, output_tokens_mean=10)

    async def scenario(backend: InProcessBackend) -> tuple[list[Outcome], float]:
        return await burst(backend, 6), now()  # each needs 1 prompt + 10 output tokens: 2 fit at once

    (outcomes, finished), backend = simulate(config, scenario)
    assert kinds(outcomes) == ["ok"] * 6
    assert backend.service.engine.stats.peak_running == 2
    assert finished == pytest.approx(0.15, abs=1e-9)  # 3 pairs, 10 steps of 5 ms each


def test_slow_start() -> None:
    config = engine(warmup_s=2.0, warmup_slowdown=5.0, step_base_s=0.01, output_tokens_mean=10)

    async def scenario(backend: InProcessBackend) -> list[tuple[float, float]]:
        seen = []
        for _ in range(2):
            factor = backend.service.metrics.values()["gymbench_sim:slowdown_factor"]
            generation = await backend.generate(ask())
            seen.append((factor, generation.timings["ttft"] + generation.timings["generation"]))
            await asyncio.sleep(2.0)
        return seen

    ((early_factor, slow), (late_factor, fast)), _ = simulate(config, scenario)
    assert early_factor == 5.0 and late_factor == 1.0
    assert fast == pytest.approx(0.1, abs=1e-9)
    assert slow > 4 * fast


def test_overload_collapse_slows_steps() -> None:
    plain = engine(max_num_seqs=2, step_base_s=0.005, output_tokens_mean=4)

    async def scenario(backend: InProcessBackend) -> tuple[float, float]:
        sent = asyncio.ensure_future(burst(backend, 12))
        await asyncio.sleep(0.001)  # inside the first step: 2 running, 10 waiting
        factor = backend.service.metrics.values()["gymbench_sim:slowdown_factor"]
        await sent
        return factor, now()

    (factor, collapsed), _ = simulate(plain.replace(collapse_threshold=2, collapse_slope=4.0), scenario)
    (no_factor, healthy), _ = simulate(plain, scenario)
    assert factor == 1 + 4.0 * (10 - 2) / 2 and no_factor == 1.0
    assert healthy == pytest.approx(0.12, abs=1e-9)  # 6 pairs, 4 steps of 5 ms each
    assert collapsed > 3 * healthy


def test_requests_per_minute_limit() -> None:
    async def scenario(backend: InProcessBackend) -> list[list[str]]:
        first = kinds(await burst(backend, 9))
        await asyncio.sleep(10.0)  # 6 a minute: one request's allowance is back
        return [first, kinds(await burst(backend, 2))]

    (first, later), backend = simulate(SimConfig(rpm_limit=6, **FAST), scenario)
    assert first == ["ok"] * 6 + ["rate_limited"] * 3
    assert later == ["ok", "rate_limited"]
    assert backend.service.metrics.values()['gymbench_sim:requests_rejected_total{reason="rate_limit"}'] == 4


def test_token_rate_limit_counts_max_tokens() -> None:
    """1000 tokens a minute; each request reserves 1 prompt + 600 tokens, so after the first only 399
    are left and the next 600 arrive 60 · 202 / 1000 = 12.12 s later."""

    async def scenario(backend: InProcessBackend) -> list[Outcome]:
        outcomes = [await backend.generate(ask(max_output_tokens=600))]
        for delay in (12.0, 0.2):
            await asyncio.sleep(delay)
            outcomes += await burst(backend, 1, max_output_tokens=600)
        return outcomes

    (first, early, later), _ = simulate(SimConfig(tpm_limit=1000, **FAST), scenario)
    assert isinstance(first, Generation) and isinstance(later, Generation)
    assert isinstance(early, GenerationFailed) and early.status == 429 and "tokens per minute" in early.reason


# --------------------------------------------------------------------------- over HTTP (no timing)


def chat(content: str = "What is 2 + 2?", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}


async def burst_http(
    server: SimServerHandle, count: int, timeout: float = 30, **extra: Any
) -> list[tuple[int, dict[str, str], Any]]:
    """Send ``count`` concurrent chat requests; (status, headers, body or exception name) each."""
    content = extra.pop("content", None)
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    async with aiohttp.ClientSession(timeout=client_timeout, connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one(index: int) -> tuple[int, dict[str, str], Any]:
            try:
                async with session.post(
                    f"{server.base_url}/chat/completions", json=chat(content or f"q{index}", **extra)
                ) as r:
                    return r.status, dict(r.headers), await r.json()
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                return -1, {}, type(exc).__name__

        return await asyncio.gather(*(one(i) for i in range(count)))


async def wait_for_metric(server: SimServerHandle, name: str, value: float, deadline_s: float = 60.0) -> None:
    """Poll ``/metrics`` until ``name`` reads ``value`` (a deadline, not a timing assertion)."""
    give_up = time.monotonic() + deadline_s
    while server.metrics().get(name) != value:
        assert time.monotonic() < give_up, f"{name} never reached {value}"
        await asyncio.sleep(0.02)


async def test_queue_full_429_over_http(sim_factory: Callable[..., SimServerHandle]) -> None:
    server = sim_factory(max_num_seqs=1, max_waiting=0, step_base_s=60.0, output_tokens_mean=8)
    occupying = asyncio.ensure_future(burst_http(server, 1, timeout=600))  # runs for 8 minutes
    try:
        await wait_for_metric(server, "vllm:num_requests_running", 1)
        ((status, headers, body),) = await burst_http(server, 1)
        rejected = server.metrics()['gymbench_sim:requests_rejected_total{reason="queue_full"}']
    finally:
        occupying.cancel()
        server.stop(timeout=0.5)  # rather than wait for the 8-minute request to end
    assert status == 429 and body["error"]["code"] == "queue_full" and body["error"]["type"] == "server_busy"
    assert int(headers["Retry-After"]) >= 1 and "retry-after-ms" in headers
    assert rejected == 1


async def test_rate_limits_give_429_with_retry_after(sim_factory: Callable[..., SimServerHandle]) -> None:
    server = sim_factory(rpm_limit=1, **FAST)  # one request a minute: the burst sees exactly one
    results = await burst_http(server, 3)
    assert sorted(status for status, _, _ in results) == [200, 429, 429]
    headers, body = next((h, b) for s, h, b in results if s == 429)
    assert body["error"]["code"] == "rate_limit_exceeded" and body["error"]["type"] == "requests"
    assert 1 <= int(headers["Retry-After"]) <= 60 and "retry-after-ms" in headers
    assert headers["x-ratelimit-limit-requests"] == "1"


async def test_error_faults(sim_factory: Callable[..., SimServerHandle]) -> None:
    server = sim_factory(error_rate=1.0, **FAST)
    status, _, body = (await burst_http(server, 3))[0]
    assert status == 500 and body["error"]["type"] == "server_error"
    assert server.metrics()['gymbench_sim:faults_injected_total{kind="error"}'] == 3


async def test_hang_lasts_until_the_client_gives_up(sim_factory: Callable[..., SimServerHandle]) -> None:
    server = sim_factory(hang_rate=1.0, **FAST)
    results = await burst_http(server, 2, timeout=2)
    assert [status for status, _, _ in results] == [-1, -1]
    assert {body for _, _, body in results} == {"TimeoutError"}
    assert server.metrics()['gymbench_sim:faults_injected_total{kind="hang"}'] == 2


async def test_reset_mid_response(sim_factory: Callable[..., SimServerHandle]) -> None:
    server = sim_factory(reset_rate=1.0, **FAST)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientPayloadError):
            async with session.post(f"{server.base_url}/chat/completions", json=chat()) as answer:
                assert answer.status == 200
                await answer.read()
        with pytest.raises((aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError)):
            async with session.post(f"{server.base_url}/chat/completions", json=chat(stream=True)) as answer:
                await answer.read()
    assert server.metrics()['gymbench_sim:faults_injected_total{kind="reset"}'] == 2


async def test_fault_rates_are_fractions(sim_factory: Callable[..., SimServerHandle]) -> None:
    server = sim_factory(error_rate=0.25, seed=3, **FAST)
    statuses = [status for status, _, _ in await burst_http(server, 200)]
    assert 30 <= statuses.count(500) <= 70
    assert statuses.count(500) + statuses.count(200) == 200


async def test_kv_cache_refuses_requests_that_can_never_fit(sim_factory: Callable[..., SimServerHandle]) -> None:
    server = sim_factory(kv_cache_tokens=30, **FAST)
    status, _, body = (await burst_http(server, 1, max_tokens=4000, content="x" * 400))[0]
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"


async def _answers(server: SimServerHandle) -> list[str]:
    out = []
    async with aiohttp.ClientSession() as session:
        for index in range(12):
            body = chat(f"What is {index} * 7?", max_tokens=6)
            async with session.post(f"{server.base_url}/chat/completions", json=body) as answer:
                out.append((await answer.json())["choices"][0]["message"]["content"])
    return out


async def test_same_seed_same_answers_other_seed_differs(sim_factory: Callable[..., SimServerHandle]) -> None:
    first = await _answers(sim_factory(seed=11, output_tokens_dist="uniform", **FAST))
    again = await _answers(sim_factory(seed=11, output_tokens_dist="uniform", **FAST))
    other = await _answers(sim_factory(seed=12, output_tokens_dist="uniform", **FAST))
    assert first == again
    assert first != other


async def test_answers_are_right_at_the_configured_rate(sim_factory: Callable[..., SimServerHandle]) -> None:
    server = sim_factory(answer_accuracy=0.7, seed=5, **FAST)
    right = 0
    async with aiohttp.ClientSession() as session:
        for a in range(100):
            async with session.post(f"{server.base_url}/chat/completions", json=chat(f"What is {a} + 3?")) as answer:
                text = (await answer.json())["choices"][0]["message"]["content"]
            right += text.splitlines()[-1] == str(a + 3)
    assert 55 <= right <= 85


async def test_code_tasks_get_python_programs(sim_factory: Callable[..., SimServerHandle]) -> None:
    server = sim_factory(answer_accuracy=0.5, seed=2, **FAST)
    question = "Write a Python program that reads integers from standard input and prints their maximum."
    outputs = []
    async with aiohttp.ClientSession() as session:
        for _ in range(30):
            async with session.post(f"{server.base_url}/chat/completions", json=chat(question)) as answer:
                outputs.append((await answer.json())["choices"][0]["message"]["content"])
    programs = [text.split("```python\n", 1)[1].split("```", 1)[0] for text in outputs]
    right = [p for p in programs if p.rstrip().endswith("print(max(nums))")]
    assert all("max(nums)" in p for p in programs)
    assert 5 <= len(right) <= 25


def test_speed_drift_swings_the_step_time_as_a_sine() -> None:
    """A shared machine's speed moving between minutes: a quarter period in, steps are 1/(1 + A) as long."""
    config = engine(speed_drift=0.2, speed_drift_period_s=8.0, step_base_s=0.01, output_tokens_mean=10)

    async def scenario(backend: InProcessBackend) -> list[float]:
        factors = []
        for _ in range(3):
            factors.append(backend.service.metrics.values()["gymbench_sim:slowdown_factor"])
            await asyncio.sleep(2.0)
        return factors

    (start, quarter, half), _ = simulate(config, scenario)
    assert start == pytest.approx(1.0) and half == pytest.approx(1.0)
    assert quarter == pytest.approx(1 / 1.2)
    with pytest.raises(GymbenchError, match=r"speed_drift must be at most 0.9, got 1 \(a share"):
        engine(speed_drift=1.0)
