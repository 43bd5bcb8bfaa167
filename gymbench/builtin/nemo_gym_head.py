"""Finding NeMo Gym agents by name, the way NeMo Gym's own tools do: ask the head server.

``ng_run`` starts a head server (``head_server.host``/``head_server.port`` in NeMo Gym's config,
127.0.0.1:11000 by default) that lists every server it started at ``GET /server_instances``: one
entry per server with its ``process_name`` (the config's top-level key, the name ``+agent_name``
gives), ``server_type`` (``responses_api_agents`` for agents), ``host``, ``port`` and ``url``. Head
servers older than that listing (NeMo Gym 0.1) answer 404 there; their ``GET
/global_config_dict_yaml`` holds the whole config, where an agent is
``NAME: {responses_api_agents: {IMPLEMENTATION: {host, port, ...}}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from gymbench.builtin.backend_settings import DEFAULT_HEAD_SERVER
from gymbench.builtin.http_client import RetryingClient
from gymbench.errors import GymbenchError
from gymbench.server_instances import ServerInstance, parse_server_instances
from gymbench.types import JSONValue

AGENT_SERVER_TYPE = "responses_api_agents"
ANY_ADDRESS = ("0.0.0.0", "::", "")
"""A server bound to every interface is reached at the head server's host."""
SHOWN_NAMES = 20


def head_server_url(head_server: Mapping[str, Any]) -> str:
    settings = {**DEFAULT_HEAD_SERVER, **head_server}
    host = str(settings["host"])
    return f"http://[{host}]:{settings['port']}" if ":" in host else f"http://{host}:{settings['port']}"


@dataclass(frozen=True)
class AgentDirectory:
    """The agents one head server knows, by name."""

    head_url: str
    agents: Mapping[str, str]
    """Agent name -> the agent server's base URL."""
    servers: tuple[ServerInstance, ...] = ()
    """Every server the head server lists, with its PID where it gives one (diagnose's per-server CPU)."""

    def url_for(self, name: str) -> str:
        url = self.agents.get(name)
        if url is None:
            raise GymbenchError(self.unknown(name))
        return url

    def unknown(self, name: str) -> str:
        names = sorted(self.agents)
        listed = ", ".join(names[:SHOWN_NAMES]) + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > 20 else "")
        known = f"the agents it knows: {listed}" if names else "it lists no agent servers (is ng_run still starting?)"
        return (
            f"the NeMo Gym head server at {self.head_url} knows no agent named {name!r}; {known}. "
            "Check +agent_name (or the rows' agent_ref), or give +agent_url=http://HOST:PORT"
        )


async def read_directory(client: RetryingClient, head_url: str) -> AgentDirectory:
    """Ask the head server which agents run, with the same quick check as every backend's server."""
    what = "NeMo Gym head server"
    try:
        listing = await client.reach(f"{head_url}/server_instances", what)
        if listing.status == 404:  # a head server from before the listing: read its config instead
            config = await client.reach(f"{head_url}/global_config_dict_yaml", what)
            return AgentDirectory(head_url, agents_from_global_config(_config_yaml(head_url, config.body), head_url))
    except GymbenchError as exc:
        raise GymbenchError(
            f"{exc} Start NeMo Gym's servers (ng_run), point +head_server.host/+head_server.port at its head "
            "server, or give the agent server itself with +agent_url=http://HOST:PORT"
        ) from None
    if listing.status != 200:
        raise GymbenchError(f"the NeMo Gym head server at {head_url} refused /server_instances (HTTP {listing.status})")
    instances = _json(head_url, "/server_instances", listing.body)
    return AgentDirectory(head_url, agents_from_instances(instances, head_url), parse_server_instances(instances))


def agents_from_instances(instances: Any, head_url: str) -> dict[str, str]:
    """``/server_instances`` entries of agent servers, by ``process_name`` (``config_path`` is the same)."""
    if not isinstance(instances, list):
        raise GymbenchError(f"the NeMo Gym head server at {head_url} sent a /server_instances that is not a list")
    agents = {}
    for entry in instances:
        if not isinstance(entry, Mapping) or entry.get("server_type") != AGENT_SERVER_TYPE:
            continue
        name = entry.get("process_name") or entry.get("config_path")
        url = _agent_url(entry.get("host"), entry.get("port"), head_url) or entry.get("url")
        if isinstance(name, str) and isinstance(url, str):
            agents[name] = url.rstrip("/")
    return agents


def agents_from_global_config(config: Any, head_url: str) -> dict[str, str]:
    """``NAME: {responses_api_agents: {IMPLEMENTATION: {host, port}}}`` entries of NeMo Gym's config."""
    agents = {}
    for name, server in config.items() if isinstance(config, Mapping) else ():
        kinds = server if isinstance(server, Mapping) else {}
        implementations = kinds.get(AGENT_SERVER_TYPE)
        if not isinstance(implementations, Mapping) or not implementations:
            continue
        instance = next(iter(implementations.values()))
        if not isinstance(instance, Mapping):
            continue
        url = _agent_url(instance.get("host"), instance.get("port"), head_url)
        if url is not None:
            agents[str(name)] = url
    return agents


def _agent_url(host: Any, port: Any, head_url: str) -> str | None:
    if not isinstance(port, int) or isinstance(port, bool):
        return None
    if not isinstance(host, str) or host in ANY_ADDRESS:
        host = urlsplit(head_url).hostname or "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _json(head_url: str, route: str, body: bytes) -> JSONValue:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise GymbenchError(f"the NeMo Gym head server at {head_url} sent {route} that is not JSON") from None


def _config_yaml(head_url: str, body: bytes) -> JSONValue:
    """FastAPI sends the YAML text as a JSON string."""
    import yaml

    from gymbench.settings import load_yaml

    text = _json(head_url, "/global_config_dict_yaml", body)
    try:
        return load_yaml(text, yaml12=False) if isinstance(text, str) else None
    except yaml.YAMLError:
        raise GymbenchError(f"the NeMo Gym head server at {head_url} sent a config that is not YAML") from None
