"""One reachability check for every built-in backend: a dead server is a clear error before any row.

Backends are made through the plugin registry with their schema's defaults, as a run makes them,
so a backend that skipped the check by default would fail here.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest
from aiohttp import web

from gymbench import GymbenchError
from gymbench.testing import make_plugins
from tests.builtin.conftest import Serve


@pytest.fixture
def dead_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def made(name: str, url: str, **settings: Any) -> Any:
    """The backend as a run makes it, its client's waits recorded instead of waited."""
    options = {"openai": {"base_url": f"{url}/v1", "model": "m"}, "nemo-gym": {"agent_url": url}}[name]
    backend = make_plugins().backend(name, {**options, **settings})
    backend.delays = []

    async def sleep(seconds: float) -> None:
        backend.delays.append(seconds)

    backend.client.sleep = sleep
    return backend


@pytest.mark.parametrize(
    ("name", "what", "probe"), [("openai", "model server", "/v1/models"), ("nemo-gym", "agent server", "")]
)
async def test_a_dead_server_fails_the_open_in_three_tries(name: str, what: str, probe: str, dead_url: str) -> None:
    backend = made(name, dead_url)
    with pytest.raises(GymbenchError) as info:
        async with backend:
            pass
    assert str(info.value).startswith(f"cannot reach the {what} at {dead_url}{probe} after 3 tries (")
    assert str(info.value).endswith("Is it running?")
    assert len(backend.delays) == 2 and backend.client.session is None


@pytest.mark.parametrize("name", ["openai", "nemo-gym"])
async def test_every_backend_reads_a_refusal_of_credentials_the_same_way(name: str, serve: Serve) -> None:
    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"error": "no key"}, status=401)

    app = web.Application()
    app.router.add_get("/{tail:.*}", refuse)
    url = (await serve(app)).removesuffix("/v1")
    with pytest.raises(GymbenchError, match=r"refused the credentials \(HTTP 401\); check the variable named by"):
        async with made(name, url):
            pass


@pytest.mark.parametrize("name", ["openai", "nemo-gym"])
async def test_preflight_false_skips_the_check(name: str, serve: Serve) -> None:
    probes: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        probes.append(request.path)
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    url = (await serve(app)).removesuffix("/v1")
    async with made(name, url, preflight=False):
        pass
    async with made(name, url):
        pass
    assert len(probes) == 1  # only the second open checked


async def test_the_head_server_lookup_goes_through_the_same_check(dead_url: str) -> None:
    port = int(dead_url.rsplit(":", 1)[1])
    backend = make_plugins().backend("nemo-gym", {"agent_name": "a", "head_server": {"port": port}})
    with pytest.raises(GymbenchError, match=r"^cannot reach the NeMo Gym head server at .* after 3 tries"):
        async with backend:
            pass
