"""Fixtures for backend tests: tiny aiohttp servers on 127.0.0.1 that answer as a test needs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

Serve = Callable[[web.Application], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start an app on an ephemeral loopback port; returns its OpenAI-style base URL (``.../v1``)."""
    runners: list[web.AppRunner] = []

    async def start(app: web.Application) -> str:
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{runner.addresses[0][1]}/v1"

    yield start
    for runner in runners:
        await runner.cleanup()
