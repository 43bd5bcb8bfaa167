"""The openai backend over real loopback HTTP against the simulated server."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from aiohttp import web

from gymbench import GenerationFailed, GenerationRequest, GymbenchError
from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.openai_backend import OpenAIBackend
from gymbench.builtin.openai_shapes import chat_body
from gymbench.sim import SimServerHandle, start_sim_server
from tests.builtin.conftest import Serve
from tests.builtin.loopback import app_with_models

FAST = {"model": "m", "step_base_s": 0.002, "step_per_seq_s": 0.0, "prefill_per_token_s": 0.0, "output_tokens_mean": 6}
QUESTION = {"input": [{"role": "user", "content": "What is 6 * 7?"}]}


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, SimServerHandle]]:
    started = {
        "fast": start_sim_server(**FAST),
        "limited": start_sim_server(rpm_limit=60, **FAST),
        "erroring": start_sim_server(error_rate=1.0, **FAST),
        "hanging": start_sim_server(hang_rate=1.0, **FAST),
        "resetting": start_sim_server(reset_rate=0.5, seed=1, **FAST),
    }
    yield started
    for handle in started.values():
        handle.stop()


def backend(server: SimServerHandle, **settings: Any) -> OpenAIBackend:
    return OpenAIBackend(OpenAISettings(base_url=server.base_url, model="m", backoff_base_s=0.01, **settings))


def request(params: dict[str, Any] = QUESTION) -> GenerationRequest:
    return GenerationRequest(0, 0, params)


def recording_sleeps(client: OpenAIBackend, wait: bool = False) -> list[float]:
    """Note each delay the client asks for between tries; wait it out only if ``wait``."""
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        if wait:
            await asyncio.sleep(seconds)

    client.client.sleep = sleep
    return delays


def keys_a_reader_uses(response: Mapping[str, Any]) -> dict[str, set[str]]:
    """The keys at each level rows are read at: the top, the first output item, its content."""
    if response.get("object") == "chat.completion":
        choice = response["choices"][0]
        return {"top": set(response), "choice": set(choice), "message": set(choice["message"])}
    item = response["output"][0]
    return {"top": set(response), "item": set(item), "content": set(item["content"][0])}


@pytest.mark.parametrize("api", ["responses", "chat"])
@pytest.mark.parametrize("stream", [False, True])
async def test_generation_through_each_api(servers: dict[str, SimServerHandle], api: str, stream: bool) -> None:
    async with backend(servers["fast"], api=api, stream=stream) as client:
        result = await client.generate(request())
    assert result.text.splitlines()[-1].lstrip("-").isdigit()
    assert result.usage.completion_tokens == 6 and result.usage.prompt_tokens > 0
    assert result.timings["generation"] > 0 and result.timings["connection_wait"] >= 0
    if stream:
        assert 0 < result.timings["ttft"] and result.timings["inter_token"] > 0
    else:
        assert "ttft" not in result.timings


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_streamed_and_plain_calls_give_responses_of_the_same_shape(
    servers: dict[str, SimServerHandle], api: str
) -> None:
    async with backend(servers["fast"], api=api, stream=True) as client:
        streamed = await client.generate(request())
    async with backend(servers["fast"], api=api) as client:
        plain = await client.generate(request())
    assert keys_a_reader_uses(streamed.response) == keys_a_reader_uses(plain.response)
    text = streamed.response["choices"][0]["message"]["content"] if api == "chat" else streamed.text
    assert text == streamed.text and streamed.text.splitlines()[-1].lstrip("-").isdigit()
    assert streamed.response["usage"] and streamed.response["model"] == "m"


async def test_a_missing_responses_endpoint_says_to_use_chat(serve: Serve) -> None:
    client = OpenAIBackend(OpenAISettings(base_url=await serve(app_with_models()), model="m", max_retries=3))
    async with client:
        with pytest.raises(GenerationFailed) as info:
            await client.generate(request())
    assert info.value.kind == "http_error" and info.value.status == 404 and info.value.retries == 0
    assert info.value.reason.startswith(
        "HTTP 404: the server has no /v1/responses endpoint (many servers only speak chat completions): "
        "add +api=chat (the server said: 404: Not Found)"
    )


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_an_unknown_model_404_points_at_the_model_not_the_endpoint(serve: Serve, api: str) -> None:
    async def unknown_model(request: web.Request) -> web.Response:
        error = {"message": "The model `m` does not exist.", "type": "NotFoundError", "code": 404}
        return web.json_response({"object": "error", **error}, status=404)

    app = app_with_models()
    app.router.add_post(f"/v1/{'responses' if api == 'responses' else 'chat/completions'}", unknown_model)
    async with OpenAIBackend(OpenAISettings(base_url=await serve(app), model="m", api=api)) as client:
        with pytest.raises(GenerationFailed) as info:
            await client.generate(request())
    assert info.value.status == 404 and "check +model" in info.value.reason and "+api" not in info.value.reason
    assert "The model `m` does not exist." in info.value.reason


async def test_rate_limits_from_the_simulator_are_retried_until_they_pass(
    servers: dict[str, SimServerHandle],
) -> None:
    """61 requests against 60 a minute: however slow the machine, every 429 is retried after the
    delay the server asks for (the exact delays are checked in test_http_client)."""
    client = backend(servers["limited"], max_retries=5)
    delays = recording_sleeps(client, wait=True)
    async with client:
        results = await asyncio.gather(*(client.generate(request()) for _ in range(61)))
    refused = servers["limited"].metrics().get('gymbench_sim:requests_rejected_total{reason="rate_limit"}', 0)
    assert len(results) == 61 and all(r.usage.completion_tokens == 6 for r in results)
    assert sum(r.retries for r in results) == len(delays) == refused


async def test_server_errors_are_retried_a_bounded_number_of_times(
    servers: dict[str, SimServerHandle],
) -> None:
    async with backend(servers["erroring"], max_retries=2) as client:
        with pytest.raises(GenerationFailed) as info:
            await client.generate(request())
    assert info.value.kind == "server_error" and info.value.status == 500 and info.value.retries == 2
    assert servers["erroring"].metrics()['gymbench_sim:faults_injected_total{kind="error"}'] == 3


async def test_a_hang_becomes_a_timeout(servers: dict[str, SimServerHandle]) -> None:
    client = backend(servers["hanging"], request_timeout_s=0.3, max_retries=1)
    delays = recording_sleeps(client)
    async with client:
        with pytest.raises(GenerationFailed) as info:
            await client.generate(request())
    assert info.value.kind == "timeout" and info.value.retries == 1 and len(delays) == 1
    assert "0.3s" in info.value.reason
    assert servers["hanging"].metrics()['gymbench_sim:faults_injected_total{kind="hang"}'] == 2


async def test_connection_resets_are_retried(servers: dict[str, SimServerHandle]) -> None:
    async with backend(servers["resetting"], max_retries=8) as client:
        results = await asyncio.gather(*(client.generate(request()) for _ in range(10)))
    assert len(results) == 10
    assert servers["resetting"].metrics()['gymbench_sim:faults_injected_total{kind="reset"}'] >= 1


async def test_bad_request_is_not_retried(servers: dict[str, SimServerHandle]) -> None:
    async with backend(servers["fast"], max_retries=5, extra_body={"temperature": "hot"}) as client:
        with pytest.raises(GenerationFailed) as info:
            await client.generate(request())
    assert info.value.kind == "bad_request" and info.value.retries == 0 and "'temperature'" in info.value.reason


async def test_unreachable_server_is_a_clear_error_after_a_bounded_number_of_tries() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    client = OpenAIBackend(OpenAISettings(base_url=f"http://127.0.0.1:{port}/v1", model="m", backoff_base_s=0.01))
    delays = recording_sleeps(client)
    pattern = r"cannot reach the model server at http://127.0.0.1:\d+/v1/models after 3 tries"
    with pytest.raises(GymbenchError, match=pattern):
        async with client:
            pass
    assert len(delays) == 2 and all(delay <= 0.02 for delay in delays)


async def test_pool_wait_is_measured_when_the_pool_is_full(servers: dict[str, SimServerHandle]) -> None:
    async with backend(servers["fast"], global_aiohttp_connector_limit=1) as client:
        results = await asyncio.gather(*(client.generate(request()) for _ in range(5)))
    assert max(r.timings["connection_wait"] for r in results) > 0.005


async def test_api_key_comes_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str | None] = []

    async def models(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        monkeypatch.setenv("MY_KEY", "sk-test-123")
        async with OpenAIBackend(
            OpenAISettings(base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key_env="MY_KEY")
        ):
            pass
        assert seen == ["Bearer sk-test-123"]
        monkeypatch.delenv("MY_KEY")
        with pytest.raises(GymbenchError, match="MY_KEY"):
            OpenAIBackend(OpenAISettings(base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key_env="MY_KEY"))
    finally:
        await runner.cleanup()


def test_missing_settings_are_clear() -> None:
    with pytest.raises(GymbenchError, match=r"\+base_url"):
        OpenAIBackend(OpenAISettings(model="m"))
    with pytest.raises(GymbenchError, match=r"\+model"):
        OpenAIBackend(OpenAISettings(base_url="http://x/v1"))
    with pytest.raises(GymbenchError, match="'api': got 'grpc', expected one of responses, chat"):
        OpenAIBackend(OpenAISettings(base_url="http://x/v1", model="m", api="grpc"))


def test_chat_translation_of_responses_params() -> None:
    body = chat_body(
        {
            "instructions": "Be brief.",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
            "max_output_tokens": 9,
            "temperature": 0.2,
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "store": False,
        }
    )
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["messages"][1]["content"] == [{"type": "text", "text": "hi"}]
    assert body["max_tokens"] == 9 and body["temperature"] == 0.2 and "store" not in body
    assert body["tools"] == [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
