"""The ``nemo-gym`` backend: drive NeMo Gym agent servers, as ``ng_collect_rollouts`` does.

Each row goes to an agent's ``/run`` with the fields NeMo Gym's collector adds (the run's request
overrides merged into ``responses_create_params``, ``_ng_task_index``, ``_ng_rollout_index``,
``agent_ref``). The agent seeds its resources server's session, calls its model, has the
resources server ``/verify`` the answer and sends back the row with ``response`` and ``reward``.
The reward is the agent's, so gymbench's own verifier is not run; every other field the agent
returns (its normalised ``responses_create_params`` included) is kept in the output row.

Which agent: ``+agent_url`` sends every row to that server. Otherwise ``+agent_name``, or else each
row's ``agent_ref.name``, is looked up in the head server's listing
(:mod:`gymbench.builtin.nemo_gym_head`), so one run can drive several agents. As in NeMo Gym 0.7.0,
``+agent_name`` routes every row to that agent, overriding a row's own ``agent_ref`` (one warning
per overridden name; NeMo Gym 0.5 let the row win).
Every agent is checked to answer before its first row is sent: a dead agent costs seconds.

Where the head server lists environment servers (NeMo Gym 0.7.0), a row goes where 0.7.0 sends it:
to the one environment server in front of its agent (the agent fronted by none or by several is an
error), and the row is stamped with that server's name (``_ng_environment_server``) and
implementation (``_ng_result_type``), as 0.7.0 stamps its results. Only rows that went through one
are stamped. ``+agent_url`` posts to the server it names, as it is. With 0.7.0's
``+environment_routing_mode=legacy +environment_server_name=NAME`` every row goes to that
environment server instead, stamped with it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import aiohttp
import orjson

from gymbench.builtin.backend_settings import HttpSettings, NemoGymSettings
from gymbench.builtin.http_client import RequestClock, RetryingClient
from gymbench.builtin.nemo_gym_head import AgentDirectory, AgentRoute, head_server_url, read_directory
from gymbench.builtin.openai_shapes import read_responses
from gymbench.console import warn
from gymbench.errors import GymbenchError
from gymbench.types import (
    ENVIRONMENT_SERVER_FIELD,
    RESULT_TYPE_FIELD,
    Generation,
    GenerationFailed,
    GenerationRequest,
    JSONObject,
)

SCORED_FIELDS = ("response", "reward")
"""What an agent's answer adds to the row; every other field it returns goes to the row as is."""


def agent_name_of(row: Mapping[str, Any]) -> str | None:
    """The row's ``agent_ref.name``, NeMo Gym's routing key, if it has one."""
    ref = row.get("agent_ref")
    name = ref.get("name") if isinstance(ref, Mapping) else None
    return name if isinstance(name, str) and name else None


class NemoGymBackend:
    def __init__(self, settings: NemoGymSettings) -> None:
        agent_url = settings.agent_url or settings.base_url
        self.agent_url = agent_url.rstrip("/") if agent_url else None
        self.agent_name = settings.agent_name or None
        self.legacy_server = settings.environment_server_name if settings.environment_routing_mode == "legacy" else None
        """NeMo Gym 0.7.0's ``environment_routing_mode=legacy``: every row to this environment server,
        stamped with it, whatever the row's own stamp or agent (as NeMo Gym stamps each flat row)."""
        self.head_url = head_server_url(settings.head_server)
        self.client = RetryingClient(settings, "agent server")
        self.directory: AgentDirectory | None = None
        self.agent_routes: dict[str, str] = {}
        """Agent names this run sent rows to, and their servers (the harness asks them for metrics)."""
        self._checks: dict[str, asyncio.Future[Any]] = {}
        self.overridden: set[str] = set()
        """Rows' own agent names that ``+agent_name`` overrode (each warned about once)."""

    async def __aenter__(self) -> NemoGymBackend:
        """Find the agents (unless +agent_url names the one) and check the first one answers."""
        await self.client.open(None)
        try:
            if self.agent_url is None:
                self.directory = await read_directory(self.client, self.head_url)
                if self.legacy_server is not None and not self.directory.environments:
                    raise GymbenchError(
                        f"+environment_routing_mode=legacy sends every row to environment server "
                        f"{self.legacy_server!r}, but the NeMo Gym head server at {self.head_url} lists no environment "
                        "servers (NeMo Gym before 0.7.0 has none): leave both settings out"
                    )
            if self.agent_url is not None or self.agent_name is not None or self.legacy_server is not None:
                await self._reachable(self._route(self.agent_name, strict=True, stamped=self.legacy_server))
        except BaseException:
            await self.client.close()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.client.close()
        self._checks.clear()

    async def generate(self, request: GenerationRequest) -> Generation:
        own = agent_name_of(request.row)
        name = self.agent_name or own
        if own is not None and name != own and own not in self.overridden:
            self.overridden.add(own)
            warn(
                f"+agent_name={name} overrides the rows' agent_ref {own!r} "
                "(as NeMo Gym 0.7.0 does; leave +agent_name out to route by agent_ref)"
            )
        route = self._route(name, stamped=self.legacy_server or request.row.get(ENVIRONMENT_SERVER_FIELD))
        try:
            return await self._generate(request, route, name, own)
        except GenerationFailed as failed:
            failed.route = _stamps(route)  # NeMo Gym 0.7.0 stamps its failed rows with the server too
            raise

    async def _generate(
        self, request: GenerationRequest, route: AgentRoute, name: str | None, own: str | None
    ) -> Generation:
        try:
            await self._reachable(route)
        except GymbenchError as exc:
            raise GenerationFailed("connection_error", str(exc)) from None
        body = {
            **request.row,
            "responses_create_params": dict(request.params),
            "_ng_task_index": request.task_index,
            "_ng_rollout_index": request.rollout_index,
        }
        if name is not None:
            body["agent_ref"] = request.row.get("agent_ref") if name == own else {"name": name}
        posted = await self.client.post(route.url + "/run", orjson.dumps(body, default=str), _read_run)
        generation: Generation = posted.value
        extra = {**generation.extra, **_stamps(route)}
        if name is not None:
            extra["agent_ref"] = body["agent_ref"]
        timings = {**generation.timings, "connection_wait": posted.connection_wait}
        return Generation(
            generation.text,
            generation.response,
            generation.usage,
            timings,
            reward=generation.reward,
            retries=posted.retries,
            extra=extra,
            client_delay=posted.client_delay,
        )

    def _route(self, name: str | None, strict: bool = False, stamped: object = None) -> AgentRoute:
        """Where a row goes; a row no agent can take fails (the whole run, when ``strict``). A row
        that names its environment server (``stamped``) goes there on a stack that has them, as
        NeMo Gym 0.7.0 dispatches it; a stack without them (before 0.7.0) ignores the field."""
        if self.agent_url is not None:
            route = AgentRoute(self.agent_url)
        elif isinstance(stamped, str) and self.directory is not None and self.directory.environments:
            try:
                return self.directory.stamped_route(stamped)
            except GymbenchError as exc:
                if strict:
                    raise
                raise GenerationFailed("bad_request", str(exc)) from None
        elif name is None:
            raise GenerationFailed(
                "bad_request",
                "the row has no agent_ref and +agent_name is not set, so no agent can run it: set +agent_name=NAME "
                "(the agent for rows without one) or add agent_ref to the rows, as NeMo Gym needs",
            )
        else:
            assert self.directory is not None
            try:
                route = self.directory.route(name)
            except GymbenchError as exc:
                if strict:
                    raise
                raise GenerationFailed("bad_request", str(exc)) from None
        if name is not None:
            self.agent_routes.setdefault(name, route.agent_url)
        return route

    async def _reachable(self, route: AgentRoute) -> None:
        """One check per server rows are posted to, shared by the rows that wait for it; its failure is kept."""
        if not self.client.preflight:
            return
        check = self._checks.get(route.url)
        if check is None:
            what = "agent server" if route.environment is None else f"environment server {route.environment.name}"
            check = self._checks[route.url] = asyncio.ensure_future(self.client.reach(route.url, what))
        await asyncio.shield(check)


def _stamps(route: AgentRoute) -> dict[str, str]:
    """What NeMo Gym 0.7.0 stamps on a result its environment server ran; nothing for a direct post."""
    if route.environment is None:
        return {}
    return {ENVIRONMENT_SERVER_FIELD: route.environment.name, RESULT_TYPE_FIELD: route.environment.result_type}


async def _read_run(answer: aiohttp.ClientResponse, clock: RequestClock) -> Generation:
    received = await answer.read()
    elapsed = {"generation": clock.stamp() - clock.sent}
    try:
        data = orjson.loads(received)
        response = data["response"]
        reward = float(data["reward"])
    except (ValueError, KeyError, TypeError) as exc:
        raise GenerationFailed("invalid_response", f"not a NeMo Gym /run answer: {exc!r}") from None
    text, usage = read_responses(response)
    extra = {key: value for key, value in data.items() if key not in SCORED_FIELDS}
    return Generation(text, response, usage, elapsed, reward=reward, extra=extra)


async def agents_aggregate_metrics(
    settings: HttpSettings, routes: Mapping[str, str], entries: Mapping[str, Any]
) -> dict[str, JSONObject | str]:
    """Each agent's own ``/aggregate_metrics`` over its rows, as ``ng_collect_rollouts`` asks after
    a run (benchmark metrics such as pass@k live there); a reason where an agent cannot.

    ``entries`` maps an agent to its rows' JSON texts (anything with ``json_array()``)."""
    client = RetryingClient(dataclasses.replace(settings, preflight=False), "agent server")
    await client.open(None)
    found: dict[str, dict[str, Any] | str] = {}
    try:
        for name, rows in entries.items():
            if name not in routes:
                continue
            body = b'{"verify_responses":' + rows.json_array() + b"}"
            try:
                found[name] = (await client.post(routes[name] + "/aggregate_metrics", body, _read_metrics)).value
            except GenerationFailed as exc:
                found[name] = f"{exc.kind}: {exc.reason}"
    finally:
        await client.close()
    return found


async def _read_metrics(answer: aiohttp.ClientResponse, clock: RequestClock) -> JSONObject:
    try:
        data = orjson.loads(await answer.read())
    except ValueError as exc:
        raise GenerationFailed("invalid_response", f"/aggregate_metrics answer is not JSON: {exc}") from None
    keys = ("agent_metrics", "key_metrics", "group_level_metrics")
    if not isinstance(data, dict) or not all(key in data for key in keys):
        raise GenerationFailed("invalid_response", f"/aggregate_metrics answer lacks {', '.join(keys)}")
    return {key: data[key] for key in keys}
