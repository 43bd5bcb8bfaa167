"""The in-process backend: the HTTP server's answers and failures, on the caller's loop, in simulated time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import pytest

from gymbench.sim import InProcessBackend, SimConfig, SimServerHandle, run_in_simulated_time
from gymbench.types import Backend, Generation, GenerationFailed, GenerationRequest

from .conftest import FAST, MODEL

T = TypeVar("T")
# Ten 10 ms steps per request, no per-sequence or prefill cost: latencies are round numbers.
TEN_STEPS = SimConfig(
    max_num_seqs=4, step_base_s=0.01, step_per_seq_s=0.0, prefill_per_token_s=0.0, output_tokens_mean=10
)


def request(content: str = "What is 2 + 2?", index: int = 0, **params: Any) -> GenerationRequest:
    return GenerationRequest(index, 0, {"input": [{"role": "user", "content": content}], **params})


def served(backend: InProcessBackend, work: Callable[[InProcessBackend], Awaitable[T]]) -> T:
    """``work(backend)`` with the backend open, in simulated time."""

    async def main() -> T:
        async with backend:
            return await work(backend)

    return run_in_simulated_time(main())


def outcome(backend: InProcessBackend, *requests: GenerationRequest) -> list[Generation | GenerationFailed]:
    """Send ``requests`` at once; each one's generation or failure."""

    async def work(opened: InProcessBackend) -> list[Any]:
        return await asyncio.gather(*(opened.generate(r) for r in requests), return_exceptions=True)

    return served(backend, work)


def test_is_a_backend_answering_in_the_responses_shape() -> None:
    backend = InProcessBackend(TEN_STEPS.replace(answer_accuracy=1.0))
    assert isinstance(backend, Backend)
    (generation,) = outcome(backend, request())
    assert isinstance(generation, Generation)
    assert generation.response["object"] == "response" and generation.response["status"] == "completed"
    assert generation.response["output"][0]["content"][0]["text"] == generation.text
    assert generation.text.splitlines()[-1] == "4"
    assert generation.usage.completion_tokens == 10 and generation.usage.prompt_tokens == 4
    assert generation.retries == 0


def test_timings_are_simulated_seconds() -> None:
    """As a streaming client measures them: time to the first token, then from it to the last."""
    (generation,) = outcome(InProcessBackend(TEN_STEPS), request())
    assert isinstance(generation, Generation)
    assert generation.timings["ttft"] == pytest.approx(0.01, abs=1e-12)
    assert generation.timings["generation"] == pytest.approx(0.09, abs=1e-12)


def test_same_answers_as_the_http_server(sim_factory: Callable[..., SimServerHandle]) -> None:
    config = SimConfig(seed=7, output_tokens_dist="uniform", **FAST)
    questions = [f"What is {n} * 3?" for n in range(6)] + ["What is 0 * 3?"]  # a repeat gets a new draw
    generations = outcome(
        InProcessBackend(config), *(request(q, i, max_output_tokens=12) for i, q in enumerate(questions))
    )
    server = sim_factory(**config.to_dict())

    async def over_http() -> list[str]:
        texts = []
        async with aiohttp.ClientSession() as session:
            for question in questions:
                body = {"model": MODEL, "input": [{"role": "user", "content": question}], "max_output_tokens": 12}
                async with session.post(f"{server.base_url}/responses", json=body) as answer:
                    texts.append((await answer.json())["output"][0]["content"][0]["text"])
        return texts

    texts = [g.text for g in generations if isinstance(g, Generation)]
    assert len(texts) == len(questions) and texts == asyncio.run(over_http())


def test_a_full_queue_fails_as_rate_limited_without_retries() -> None:
    backend = InProcessBackend(TEN_STEPS.replace(max_num_seqs=1, max_waiting=0))
    first, second = outcome(backend, request(index=0), request(index=1))
    assert isinstance(first, Generation)
    assert isinstance(second, GenerationFailed)
    assert (second.kind, second.status, second.retries) == ("rate_limited", 429, 0)
    assert "queue is full" in second.reason
    assert backend.service.metrics.values()['gymbench_sim:requests_rejected_total{reason="queue_full"}'] == 1


def test_retries_wait_what_retry_after_asks() -> None:
    backend = InProcessBackend(TEN_STEPS.replace(rpm_limit=1), max_retries=1)

    async def work(opened: InProcessBackend) -> list[tuple[int, float]]:
        loop = asyncio.get_running_loop()

        async def timed(index: int) -> tuple[int, float]:
            generation = await opened.generate(request(index=index))
            return generation.retries, loop.time()

        return await asyncio.gather(timed(0), timed(1))

    (retries_a, done_a), (retries_b, done_b) = served(backend, work)
    assert (retries_a, retries_b) == (0, 1)
    assert done_a == pytest.approx(0.1)
    assert done_b == pytest.approx(60.0 + 0.1)  # one request a minute: refilled after 60 s


def test_retries_are_bounded() -> None:
    backend = InProcessBackend(TEN_STEPS.replace(error_rate=1.0), max_retries=3, backoff_s=1.0)
    (failure,) = outcome(backend, request())
    assert isinstance(failure, GenerationFailed)
    assert (failure.kind, failure.status, failure.retries) == ("server_error", 500, 3)
    assert backend.service.metrics.values()['gymbench_sim:faults_injected_total{kind="error"}'] == 4


def test_a_hang_ends_at_the_timeout_and_frees_nothing_it_did_not_take() -> None:
    backend = InProcessBackend(TEN_STEPS.replace(hang_rate=1.0), timeout_s=30.0)

    async def work(opened: InProcessBackend) -> tuple[GenerationFailed, float]:
        with pytest.raises(GenerationFailed) as failed:
            await opened.generate(request())
        return failed.value, asyncio.get_running_loop().time()

    failure, ended = served(backend, work)
    assert failure.kind == "timeout" and ended == 30.0
    assert not backend.service.engine.running and not backend.service.engine.waiting


def test_a_slow_request_past_the_timeout_leaves_the_engine() -> None:
    backend = InProcessBackend(TEN_STEPS, timeout_s=0.05)
    (failure,) = outcome(backend, request())
    assert isinstance(failure, GenerationFailed) and failure.kind == "timeout"
    assert not backend.service.engine.running and backend.service.engine.stats.finished == 0


def test_a_reset_fails_after_the_engine_did_the_work() -> None:
    backend = InProcessBackend(TEN_STEPS.replace(reset_rate=1.0))
    (failure,) = outcome(backend, request())
    assert isinstance(failure, GenerationFailed) and failure.kind == "connection_error"
    assert backend.service.engine.stats.finished == 1


@pytest.mark.parametrize(
    ("params", "needle"),
    [({"input": 3}, "'input' must be"), ({"input": "x" * 400, "max_output_tokens": 4000}, "KV tokens")],
)
def test_bad_requests_fail_at_once_and_are_not_retried(params: dict[str, Any], needle: str) -> None:
    backend = InProcessBackend(TEN_STEPS.replace(kv_cache_tokens=100), max_retries=5)
    (failure,) = outcome(backend, GenerationRequest(0, 0, params))
    assert isinstance(failure, GenerationFailed)
    assert (failure.kind, failure.status, failure.retries) == ("bad_request", 400, 0)
    assert needle in failure.reason


def test_one_server_life_across_several_runs() -> None:
    """A tuner opens the backend once per probe: warm-up, counters and metrics carry over."""
    backend = InProcessBackend(TEN_STEPS.replace(warmup_s=1.0))

    async def main() -> list[float]:
        factors = []
        for _ in range(2):
            async with backend:
                await backend.generate(request())
                factors.append(backend.service.engine.slowdown(asyncio.get_running_loop().time()))
            await asyncio.sleep(1.0)
        return factors

    first, second = run_in_simulated_time(main())
    assert first > 1.0 and second == 1.0
    assert backend.service.engine.stats.finished == 2


def test_the_server_exists_once_opened_and_on_one_loop_only() -> None:
    backend = InProcessBackend(TEN_STEPS)
    with pytest.raises(RuntimeError, match="before it is first entered"):
        backend.service  # noqa: B018
    outcome(backend, request())
    with pytest.raises(RuntimeError, match="only the event loop"):
        outcome(backend, request())
