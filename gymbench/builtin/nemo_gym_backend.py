"""The ``nemo-gym`` backend: drive a NeMo Gym agent server, as ``ng_collect_rollouts`` does.

Each row (with the run's request overrides merged into ``responses_create_params``) is POSTed to
the agent's ``/run``; the agent calls its model and its resources server's ``verify`` and answers
with the row plus ``response`` and ``reward``. The reward is the agent's, so gymbench's own
verifier is not run; every other field the agent returns is kept in the output row, so files
from NeMo Gym and gymbench can be read together.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import aiohttp
import orjson

from gymbench.builtin.http_client import RetryingClient
from gymbench.builtin.openai_shapes import read_responses
from gymbench.errors import GymbenchError
from gymbench.types import Generation, GenerationFailed, GenerationRequest

AGENT_FIELDS = ("responses_create_params", "response", "reward")


class NemoGymBackend:
    def __init__(self, settings: Mapping[str, Any]) -> None:
        agent_url = settings.get("agent_url") or settings.get("base_url")
        if not agent_url:
            raise GymbenchError(
                "the nemo-gym backend needs +agent_url=http://HOST:PORT (the agent server; gymbench does not "
                "resolve +agent_name through a NeMo Gym head server)"
            )
        self.agent_url = str(agent_url).rstrip("/")
        self.run_url = self.agent_url + "/run"
        self.agent_name = settings.get("agent_name")
        self.client = RetryingClient({"preflight": False, **settings}, "agent server")

    async def __aenter__(self) -> NemoGymBackend:
        """Off by default, +preflight=true checks that the agent server answers at all (any HTTP
        status will do: agents have no health route in common)."""
        await self.client.open(self.agent_url)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.client.close()

    async def generate(self, request: GenerationRequest) -> Generation:
        row = {**request.row, "responses_create_params": dict(request.params)}
        posted = await self.client.post(self.run_url, orjson.dumps(row, default=str), _read_run)
        generation: Generation = posted.value
        timings = {**generation.timings, "connection_wait": posted.connection_wait}
        return Generation(
            generation.text,
            generation.response,
            generation.usage,
            timings,
            reward=generation.reward,
            retries=posted.retries,
            extra=generation.extra,
        )


async def _read_run(answer: aiohttp.ClientResponse, started: float) -> Generation:
    try:
        data = orjson.loads(await answer.read())
        response = data["response"]
        reward = float(data["reward"])
    except (ValueError, KeyError, TypeError) as exc:
        raise GenerationFailed("invalid_response", f"not a NeMo Gym /run answer: {exc!r}") from None
    text, usage = read_responses(response)
    extra = {key: value for key, value in data.items() if key not in AGENT_FIELDS}
    return Generation(text, response, usage, {"generation": time.perf_counter() - started}, reward=reward, extra=extra)
