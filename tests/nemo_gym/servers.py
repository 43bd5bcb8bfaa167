"""The servers of a NeMo-Gym-compatible agent stack, in NeMo Gym's request and response shapes.

Read from NeMo Gym's source (see ``docs/nemo-gym.md``):

* a **resources server**: ``POST /seed_session`` (sets a session cookie), ``POST /verify`` (the
  run request plus ``response`` in, the same plus ``reward`` out; it refuses a session it did not
  seed), one tool route, and ``POST /aggregate_metrics``;
* an **agent server** (NeMo Gym's simple agent): ``POST /run`` validates and normalises
  ``responses_create_params`` as NeMo Gym's pydantic model does (every field, defaults filled,
  unknown ones a 422), seeds the session, calls the model until it answers without a tool call
  (tool calls go to the resources server), has the answer verified and returns the verify
  response; ``POST /aggregate_metrics`` is proxied to the resources server; ``GET /`` is liveness;
* an **environment server** (NeMo Gym 0.7.0's ``legacy_agent`` relay): ``POST /run`` relayed to
  its agent unchanged, its answer back; ``POST /aggregate_metrics`` forwarded likewise;
* a **head server**: ``GET /server_instances`` (one entry per server: ``process_name``,
  ``server_type``, ``name``, ``host``, ``port``, ``url``, ...) and ``GET /global_config_dict_yaml``
  (the config as YAML in a JSON string; an environment server's block names the agents it fronts,
  ``agent_server: {type: responses_api_agents, name: AGENT}``, as 0.7.0's merged config does).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import yaml
from aiohttp import web

PARAM_DEFAULTS: dict[str, Any] = {
    "background": None, "include": None, "input": None, "instructions": None, "max_output_tokens": None,
    "max_tool_calls": None, "metadata": None, "model": None, "parallel_tool_calls": True,
    "previous_response_id": None, "prompt": None, "reasoning": None, "service_tier": None, "store": None,
    "temperature": None, "text": None, "tool_choice": "auto", "tools": [], "top_logprobs": None, "top_p": None,
    "truncation": None, "user": None, "stream": None,
}  # fmt: skip
"""``NeMoGymResponseCreateParamsNonStreaming``'s fields and defaults, in its order (extra fields forbidden)."""
AGENT_TYPE, RESOURCES_TYPE, MODEL_TYPE = "responses_api_agents", "resources_servers", "responses_api_models"
ENVIRONMENT_TYPE = "environment_servers"


def normalise_params(params: Any) -> dict[str, Any]:
    """What NeMo Gym's ``model_dump()`` of the validated request gives; a ValueError where it would 422."""
    if not isinstance(params, dict) or "input" not in params:
        raise ValueError("responses_create_params: field required (input)")
    unknown = sorted(set(params) - set(PARAM_DEFAULTS))
    if unknown:
        raise ValueError(f"responses_create_params: extra inputs are not permitted: {unknown}")
    normalised = {**PARAM_DEFAULTS, **params, "tools": list(params.get("tools") or [])}
    if isinstance(params["input"], list):
        normalised["input"] = [_input_item(item) for item in params["input"]]
    return normalised


def _input_item(item: Any) -> Any:
    if isinstance(item, dict) and "role" in item and "type" not in item:  # an EasyInputMessage
        return {"content": item.get("content"), "role": item["role"], "type": "message"}
    return item


def last_line(response: dict[str, Any]) -> str:
    texts = [
        part.get("text", "")
        for item in response.get("output", [])
        if item.get("type") == "message"
        for part in item.get("content", [])
    ]
    lines = "".join(texts).strip().splitlines()
    return lines[-1].strip() if lines else ""


@dataclass
class ResourcesServer:
    """A resources server: sessions, one tool, verification by the answer's last line."""

    name: str
    sessions: set[str] = field(default_factory=set)
    verified: int = 0
    tool_calls: int = 0
    _ids: Iterator[int] = field(default_factory=itertools.count)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", _liveness)
        app.router.add_post("/seed_session", self.seed_session)
        app.router.add_post("/verify", self.verify)
        app.router.add_post("/lookup", self.lookup)
        app.router.add_post("/aggregate_metrics", self.aggregate_metrics)
        return app

    async def seed_session(self, request: web.Request) -> web.Response:
        await request.json()
        session = f"{self.name}-{next(self._ids)}"
        self.sessions.add(session)
        answer = web.json_response({})
        answer.set_cookie("session_id", session)
        return answer

    async def verify(self, request: web.Request) -> web.Response:
        if request.cookies.get("session_id") not in self.sessions:
            return web.json_response({"detail": "verify without a seeded session"}, status=400)
        body = await request.json()
        answer = last_line(body["response"])
        self.verified += 1
        reward = 1.0 if answer == str(body.get("expected_answer", "")).strip() else 0.0
        return web.json_response({**body, "reward": reward, "extracted_answer": answer})

    async def lookup(self, request: web.Request) -> web.Response:
        self.tool_calls += 1
        return web.json_response({"result": "looked up", "arguments": await request.json()})

    async def aggregate_metrics(self, request: web.Request) -> web.Response:
        """A benchmark's own metrics (pass@1 over tasks), so a test can tell they came from here."""
        rows = (await request.json())["verify_responses"]
        by_task: dict[int, list[float]] = {}
        for row in rows:
            by_task.setdefault(row["_ng_task_index"], []).append(row["reward"])
        pass_at_1 = sum(sum(r) / len(r) for r in by_task.values()) / len(by_task)
        metrics = {"pass@1": pass_at_1, "mean/reward": sum(r["reward"] for r in rows) / len(rows)}
        groups = [{"_ng_task_index": task, "pass@1": sum(r) / len(r)} for task, r in sorted(by_task.items())]
        return web.json_response(
            {"group_level_metrics": groups, "agent_metrics": metrics, "key_metrics": {"pass@1": pass_at_1}}
        )


@dataclass
class AgentServer:
    """NeMo Gym's simple agent: seed, call the model (and tools) until it answers, verify."""

    name: str
    resources_url: str
    model_base_url: str
    model: str
    max_steps: int = 4
    aggregates: bool = True
    """Serve ``/aggregate_metrics`` (proxied to the resources server); without it the route is a 404."""
    concurrency: int = 0
    """Runs the agent serves at once (0: no limit): a saturated agent server, for diagnosis tests."""
    overhead_s: float = 0.0
    """The agent's own time per run, spent while holding one of its ``concurrency`` places."""
    seen: list[tuple[int, int]] = field(default_factory=list)
    """``(_ng_task_index, _ng_rollout_index)`` of every ``/run``, in arrival order."""
    liveness_checks: int = 0
    session: aiohttp.ClientSession | None = None
    _places: Any = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self.liveness)
        app.router.add_post("/run", self.run)
        if self.aggregates:
            app.router.add_post("/aggregate_metrics", self.aggregate_metrics)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, app: web.Application) -> None:
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        self._places = asyncio.Semaphore(self.concurrency) if self.concurrency else contextlib.nullcontext()

    async def _close(self, app: web.Application) -> None:
        assert self.session is not None
        await self.session.close()

    async def liveness(self, request: web.Request) -> web.Response:
        self.liveness_checks += 1
        return await _liveness(request)

    async def run(self, request: web.Request) -> web.Response:
        body = await request.json()
        try:
            params = normalise_params(body.get("responses_create_params"))
        except ValueError as exc:
            return web.json_response({"detail": [{"msg": str(exc)}]}, status=422)
        body = {**body, "responses_create_params": params}
        self.seen.append((body.get("_ng_task_index"), body.get("_ng_rollout_index")))
        async with self._places:
            await asyncio.sleep(self.overhead_s)
            seeded = await self._post(f"{self.resources_url}/seed_session", body)
            cookies = {"session_id": seeded.cookies["session_id"].value}
            response = await self._episode(params, cookies)
            verified = await self._post(f"{self.resources_url}/verify", {**body, "response": response}, cookies)
            return web.json_response(await verified.json())

    async def _episode(self, params: dict[str, Any], cookies: dict[str, str]) -> dict[str, Any]:
        """Model turns until an answer without a tool call; the outputs of every turn are kept."""
        items = params["input"] if isinstance(params["input"], list) else [
            {"content": params["input"], "role": "user", "type": "message"}
        ]  # fmt: skip
        outputs: list[dict[str, Any]] = []
        for _step in range(self.max_steps):
            turn = {k: v for k, v in params.items() if v is not None and k != "stream"}
            answer = await self._post(
                f"{self.model_base_url}/responses", {**turn, "model": self.model, "input": items + outputs}
            )
            response = await answer.json()
            outputs.extend(response["output"])
            calls = [item for item in response["output"] if item.get("type") == "function_call"]
            if not calls:
                break
            for call in calls:
                result = await self._post(f"{self.resources_url}/lookup", json.loads(call["arguments"]), cookies)
                output = await result.text()
                outputs.append({"type": "function_call_output", "call_id": call["call_id"], "output": output})
        return {**response, "output": outputs}

    async def _post(self, url: str, body: Any, cookies: dict[str, str] | None = None) -> aiohttp.ClientResponse:
        assert self.session is not None
        answer = await self.session.post(url, json=body, cookies=cookies)
        answer.raise_for_status()
        await answer.read()
        return answer

    async def aggregate_metrics(self, request: web.Request) -> web.Response:
        answer = await self._post(f"{self.resources_url}/aggregate_metrics", await request.json())
        return web.json_response(await answer.json())


@dataclass
class EnvironmentServer:
    """NeMo Gym 0.7.0's ``legacy_agent`` environment server: relays ``/run`` to its agent as it is."""

    agent_url: str
    runs: int = 0
    """``/run`` requests it relayed: a test counts what went through it."""
    refuse: int | None = None
    """Answer every ``/run`` with this status instead of relaying it (a server that fails rows)."""
    session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/run", self.run)
        app.router.add_post("/aggregate_metrics", self.aggregate_metrics)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app  # no GET /: 0.7.0's relay has none (a 404 still says it is up)

    async def _open(self, app: web.Application) -> None:
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def _close(self, app: web.Application) -> None:
        assert self.session is not None
        await self.session.close()

    async def run(self, request: web.Request) -> web.Response:
        self.runs += 1
        if self.refuse is not None:
            return web.json_response({"detail": "refused by the test"}, status=self.refuse)
        return await self._relay(request, "/run")

    async def aggregate_metrics(self, request: web.Request) -> web.Response:
        return await self._relay(request, "/aggregate_metrics")

    async def _relay(self, request: web.Request, route: str) -> web.Response:
        assert self.session is not None
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with self.session.post(self.agent_url + route, data=await request.read(), headers=headers) as answer:
            return web.Response(body=await answer.read(), status=answer.status, content_type=answer.content_type)


@dataclass
class HeadServer:
    """NeMo Gym's head server: the listing of the servers it started, and its config."""

    instances: list[dict[str, Any]] = field(default_factory=list)
    legacy: bool = False
    """Answer 404 at /server_instances, as head servers of NeMo Gym 0.1 do."""
    fronted: dict[str, list[str]] = field(default_factory=dict)
    """Environment server (process name) -> the agents its config block names."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", _liveness)
        if not self.legacy:
            app.router.add_get("/server_instances", self.server_instances)
        app.router.add_get("/global_config_dict_yaml", self.global_config)
        return app

    async def server_instances(self, request: web.Request) -> web.Response:
        return web.json_response(self.instances)

    async def global_config(self, request: web.Request) -> web.Response:
        config = {
            entry["process_name"]: {entry["server_type"]: {entry["name"]: self._block(entry)}}
            for entry in self.instances
        }
        return web.json_response(yaml.safe_dump(config))

    def _block(self, entry: dict[str, Any]) -> dict[str, Any]:
        """One implementation's config; an environment server's names its agents as 0.7.0's does (the
        first as ``agent_server``, others as fields with ``type: responses_api_agents``)."""
        block: dict[str, Any] = {"entrypoint": "app.py", "host": entry["host"], "port": entry["port"]}
        for index, agent in enumerate(self.fronted.get(entry["process_name"], ())):
            field_name = "agent_server" if index == 0 else f"agent_{index}"
            block[field_name] = {"type": AGENT_TYPE, "name": agent}
        return block


def instance(process_name: str, server_type: str, name: str, port: int) -> dict[str, Any]:
    """One ``/server_instances`` entry, with every field NeMo Gym's ``ServerInstanceDisplayConfig`` has."""
    return {
        "config_path": process_name, "dir_path": f"{server_type}/{name}", "entrypoint": "app.py",
        "host": "127.0.0.1", "name": name, "pid": os.getpid(), "port": port, "process_name": process_name,
        "server_type": server_type, "start_time": 0.0, "status": None, "uptime_seconds": None,
        "url": f"http://127.0.0.1:{port}",
    }  # fmt: skip


async def _liveness(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})
