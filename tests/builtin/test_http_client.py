"""The shared HTTP client: settings checks, retry delays, secrets kept out of reasons, clean failures."""

from __future__ import annotations

import asyncio
import math
import sys
from typing import Any

import pytest
from aiohttp import web

from gymbench import GenerationFailed, GenerationRequest, GymbenchError
from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.http_client import RetryingClient
from gymbench.builtin.openai_backend import OpenAIBackend
from gymbench.testing import make_plugins
from tests.builtin.conftest import Serve
from tests.builtin.loopback import app_with_models, chat_completion

QUESTION = GenerationRequest(0, 0, {"input": "What is 6 * 7?"})


def recording_sleeps(backend: OpenAIBackend) -> list[float]:
    """Make the backend's client note each delay it asks for instead of waiting it out."""
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    backend.client.sleep = sleep
    return delays


def refusing_then_answering(refusals: int, status: int, headers: dict[str, str]) -> tuple[web.Application, list[int]]:
    """A chat server that refuses the first ``refusals`` requests, then answers."""
    seen: list[int] = []

    async def chat(request: web.Request) -> web.Response:
        seen.append(len(seen))
        if len(seen) <= refusals:
            return web.json_response({"error": {"message": "slow down"}}, status=status, headers=headers)
        return web.json_response(chat_completion())

    app = app_with_models()
    app.router.add_post("/v1/chat/completions", chat)
    return app, seen


@pytest.mark.parametrize(
    ("headers", "at_least"), [({"Retry-After": "1"}, 1.0), ({"retry-after-ms": "1500", "Retry-After": "2"}, 1.5)]
)
async def test_retry_after_is_honoured_as_the_requested_delay(
    serve: Serve, headers: dict[str, str], at_least: float
) -> None:
    app, seen = refusing_then_answering(2, 429, headers)
    backend = OpenAIBackend(OpenAISettings(base_url=await serve(app), model="m", api="chat", backoff_base_s=0.01))
    delays = recording_sleeps(backend)
    async with backend:
        result = await backend.generate(QUESTION)
    assert result.text == "42" and result.retries == 2 and len(seen) == 3
    assert len(delays) == 2 and all(at_least <= delay <= at_least + 0.02 for delay in delays)


async def test_backoff_without_retry_after_stays_in_its_window(serve: Serve) -> None:
    app, seen = refusing_then_answering(3, 503, {})
    backend = OpenAIBackend(OpenAISettings(base_url=await serve(app), model="m", api="chat", backoff_base_s=0.01))
    delays = recording_sleeps(backend)
    async with backend:
        result = await backend.generate(QUESTION)
    assert result.retries == 3 and len(delays) == 3
    assert all(0 <= delay <= 0.01 * 2**retry for retry, delay in enumerate(delays))


SECRET = "gymbench-test-secret-c0ffee"  # not shaped like an sk- key: only the registry can catch it


def echoing_server(status: int) -> web.Application:
    """Answers every request with an error that quotes the request's ``Authorization`` header."""

    async def echo(request: web.Request) -> web.Response:
        header = request.headers.get("Authorization", "")
        key = header.removeprefix("Bearer ")
        text = f'{{"error": "bad credentials: {header}", "key": "{key}"}}'
        return web.Response(text=text, status=status, content_type="application/json")

    app = app_with_models()
    app.router.add_post("/v1/responses", echo)
    app.router.add_post("/v1/chat/completions", echo)
    return app


@pytest.mark.parametrize(("status", "api", "kind"), [(400, "responses", "bad_request"), (500, "chat", "server_error")])
async def test_an_echoed_api_key_never_reaches_the_failure_reason(
    serve: Serve, monkeypatch: pytest.MonkeyPatch, status: int, api: str, kind: str
) -> None:
    monkeypatch.setenv("GYMBENCH_TEST_KEY", SECRET)
    settings = {"model": "m", "api": api, "api_key_env": "GYMBENCH_TEST_KEY", "max_retries": 1}
    backend = OpenAIBackend(OpenAISettings(base_url=await serve(echoing_server(status)), **settings))
    recording_sleeps(backend)
    async with backend:
        with pytest.raises(GenerationFailed) as info:
            await backend.generate(QUESTION)
    reason = info.value.reason
    assert info.value.kind == kind and info.value.status == status
    assert SECRET not in reason and f"Bearer {SECRET}" not in reason and SECRET[:12] not in reason
    assert "[REDACTED]" in reason and "bad credentials" in reason


CLEAN_EXIT_SCRIPT = """
import asyncio, gc, sys
from gymbench.errors import GymbenchError
from gymbench.builtin.backend_settings import NemoGymSettings, OpenAISettings
from gymbench.builtin.nemo_gym_backend import NemoGymBackend
from gymbench.builtin.openai_backend import OpenAIBackend

async def main():
    fast = {"backoff_base_s": 0.001, "preflight": True}
    for backend in (
        OpenAIBackend(OpenAISettings(base_url="http://127.0.0.1:1/v1", model="m", **fast)),
        OpenAIBackend(OpenAISettings(base_url=sys.argv[1], model="m", **fast)),
        NemoGymBackend(NemoGymSettings(agent_url="http://127.0.0.1:1", **fast)),
    ):
        try:
            async with backend:
                pass
        except GymbenchError as exc:
            print(exc, file=sys.stderr)
        del backend
        gc.collect()  # an unclosed session complains when it is collected: make that happen now
        await asyncio.sleep(0)

asyncio.run(main())
"""


async def test_a_failed_open_leaves_no_unclosed_session_behind(serve: Serve) -> None:
    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"error": "no"}, status=401)

    app = web.Application()
    app.router.add_get("/v1/models", refuse)
    base_url = await serve(app)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CLEAN_EXIT_SCRIPT,
        base_url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(child.communicate(), timeout=120)
    lines = stderr.decode().strip().splitlines()
    assert child.returncode == 0 and "Unclosed" not in stderr.decode()
    assert len(lines) == 3, lines  # the three errors and nothing else
    assert lines[0].startswith("cannot reach the model server at http://127.0.0.1:1/v1/models after 3 tries")
    assert lines[1] == f"{base_url}/models refused the credentials (HTTP 401); check the variable named by +api_key_env"
    assert lines[2].startswith("cannot reach the agent server at http://127.0.0.1:1 after 3 tries")


async def test_the_preflight_tries_three_times_with_backoff_between() -> None:
    backend = OpenAIBackend(OpenAISettings(base_url="http://127.0.0.1:1/v1", model="m"))
    delays = recording_sleeps(backend)
    with pytest.raises(GymbenchError, match=r"after 3 tries \(ClientConnectorError"):
        async with backend:
            pass
    assert len(delays) == 2 and backend.client.session is None


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("request_timeout_s", 0, "above 0"),
        ("request_timeout_s", -1.5, "above 0"),
        ("request_timeout_s", math.inf, "finite"),
        ("connect_timeout_s", math.nan, "finite"),
        ("connect_timeout_s", True, "expected a number"),
        ("max_retries", -1, "from 0 to 100"),
        ("max_retries", 2.5, "expected a whole number"),
        ("max_retries", True, "expected a whole number"),
        ("global_aiohttp_connector_limit", -5, "at least 0"),
        ("global_aiohttp_connector_limit_per_host", 1.5, "expected a whole number"),
        ("backoff_base_s", -0.1, "from 0.0"),
    ],
)
def test_bad_http_settings_name_the_setting_value_and_what_is_allowed(name: str, value: Any, allowed: str) -> None:
    """The client takes its checked settings object: a bad value never reaches it (aiohttp reads a 0
    timeout as none at all), it stops where the settings are built, naming the setting."""
    with pytest.raises(GymbenchError) as info:
        make_plugins().check("backend", "openai", {"base_url": "http://127.0.0.1:9/v1", "model": "m", name: value})
    message = str(info.value)
    assert repr(name) in message and str(value) in message and allowed in message


def test_the_client_reads_its_settings_object() -> None:
    client = RetryingClient(OpenAISettings(request_timeout_s=2, max_retries=3, global_aiohttp_connector_limit=0), "x")
    assert client.timeout.total == 2 and client.retry.max_retries == 3 and client.limits == (0, 16384)
