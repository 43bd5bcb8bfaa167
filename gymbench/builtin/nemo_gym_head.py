"""Finding NeMo Gym agents by name, the way NeMo Gym's own tools do: ask the head server.

``ng_run`` starts a head server (``head_server.host``/``head_server.port`` in NeMo Gym's config,
127.0.0.1:11000 by default) that lists every server it started at ``GET /server_instances``: one
entry per server with its ``process_name`` (the config's top-level key, the name ``+agent_name``
gives), ``server_type`` (``responses_api_agents`` for agents), ``host``, ``port`` and ``url``. Head
servers older than that listing (NeMo Gym 0.1) answer 404 there; their ``GET
/global_config_dict_yaml`` holds the whole config, where an agent is
``NAME: {responses_api_agents: {IMPLEMENTATION: {host, port, ...}}}``.

NeMo Gym 0.7.0 reaches an agent only through the one **environment server** in front of it: a config
entry ``NAME: {environment_servers: {IMPLEMENTATION: {agent_server: {name: AGENT}, host, port}}}``
(``ng_run`` generates a ``legacy_agent`` relay for every agent without one). ``/server_instances``
lists environment servers but not which agent each fronts, so when it lists any, the config is read
too, and :meth:`AgentDirectory.route` applies 0.7.0's rule (``_environment_server_for_agent``): one
in front of the agent is where its rows go; none or several is an error. A head server that lists
no environment server at all (NeMo Gym before 0.7.0) keeps the direct post to the agent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from gymbench.builtin.backend_settings import DEFAULT_HEAD_SERVER
from gymbench.builtin.http_client import RetryingClient
from gymbench.errors import GymbenchError
from gymbench.server_instances import ServerInstance, parse_server_instances
from gymbench.types import JSONValue

AGENT_SERVER_TYPE = "responses_api_agents"
ENVIRONMENT_SERVER_TYPE = "environment_servers"
AGENT_REF_FIELD = "agent_server"
"""The field an environment server names its agent in (its ``type`` may be left out there)."""
ANY_ADDRESS = ("0.0.0.0", "::", "")
"""A server bound to every interface is reached at the head server's host."""
SHOWN_NAMES = 20


def head_server_url(head_server: Mapping[str, Any]) -> str:
    settings = {**DEFAULT_HEAD_SERVER, **head_server}
    host = str(settings["host"])
    return f"http://[{host}]:{settings['port']}" if ":" in host else f"http://{host}:{settings['port']}"


@dataclass(frozen=True)
class EnvironmentServer:
    """An environment server of NeMo Gym 0.7.0: rows of the agents it fronts are posted to it."""

    name: str
    """The config's top-level key: stamped on each row it ran as ``_ng_environment_server``."""
    url: str
    result_type: str
    """The implementation under ``environment_servers:`` (``legacy_agent``, ...): ``_ng_result_type``."""


@dataclass(frozen=True)
class AgentRoute:
    """Where one agent's rows are posted: its environment server where the stack has them, else the agent."""

    agent_url: str
    environment: EnvironmentServer | None = None

    @property
    def url(self) -> str:
        return self.environment.url if self.environment is not None else self.agent_url


@dataclass(frozen=True)
class AgentDirectory:
    """The agents one head server knows, by name, and the environment servers in front of them."""

    head_url: str
    agents: Mapping[str, str]
    """Agent name -> the agent server's base URL."""
    servers: tuple[ServerInstance, ...] = ()
    """Every server the head server lists, with its PID where it gives one (diagnose's per-server CPU)."""
    environments: Mapping[str, EnvironmentServer] = field(default_factory=dict)
    """Environment servers by name; empty for a stack that has none (NeMo Gym before 0.7.0)."""
    fronting: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Agent name -> the environment servers that front it, one entry per implementation as 0.7.0 counts."""

    def url_for(self, name: str) -> str:
        url = self.agents.get(name)
        if url is None:
            raise GymbenchError(self.unknown(name))
        return url

    def stamped_route(self, server: str) -> AgentRoute:
        """The route of a row that names its environment server (``_ng_environment_server``): NeMo Gym
        0.7.0 posts such a row there, whatever its agent, and refuses a name its config lacks."""
        environment = self.environments.get(server)
        if environment is None:
            listed = ", ".join(sorted(self.environments)[:SHOWN_NAMES])
            raise GymbenchError(
                f"the row names environment server {server!r} (_ng_environment_server), which the NeMo Gym head "
                f"server at {self.head_url} does not list (it lists {listed}); NeMo Gym 0.7.0 refuses it too: "
                "remove the field from the input rows to route them by their agent"
            )
        agents = [agent for agent, servers in self.fronting.items() if server in servers and agent in self.agents]
        return AgentRoute(self.agents[agents[0]] if len(agents) == 1 else environment.url, environment)

    def route(self, name: str) -> AgentRoute:
        """The agent's route, by 0.7.0's rule when the stack has environment servers."""
        url = self.url_for(name)
        if not self.environments and not self.fronting:
            return AgentRoute(url)
        fronting = self.fronting.get(name, ())
        if len(fronting) == 1:
            environment = self.environments.get(fronting[0])
            if environment is None:
                raise GymbenchError(
                    f"the NeMo Gym head server at {self.head_url} gives no host and port for environment server "
                    f"{fronting[0]!r}, in front of agent {name!r}; give +agent_url=http://HOST:PORT"
                )
            return AgentRoute(url, environment)
        if fronting:
            raise GymbenchError(
                f"the NeMo Gym head server at {self.head_url} lists several environment servers in front of agent "
                f"{name!r}: {', '.join(sorted(fronting))}; rows routed by agent cannot choose between them (NeMo Gym "
                "0.7.0 refuses them too): keep one of them in the config, or give +agent_url=http://HOST:PORT"
            )
        listed = ", ".join(sorted(self.environments)[:SHOWN_NAMES])
        raise GymbenchError(
            f"the NeMo Gym head server at {self.head_url} lists no environment server in front of agent {name!r} "
            f"(it lists {listed}), and NeMo Gym 0.7.0 reaches an agent only through one: declare one "
            f"(environment_servers: legacy_agent: agent_server: {{name: {name}}}), or give +agent_url=http://HOST:PORT"
        )

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
            config = await read_global_config(client, head_url)
            return _with_environments(AgentDirectory(head_url, agents_from_global_config(config, head_url)), config)
    except GymbenchError as exc:
        raise GymbenchError(
            f"{exc} Start NeMo Gym's servers (ng_run), point +head_server.host/+head_server.port at its head "
            "server, or give the agent server itself with +agent_url=http://HOST:PORT"
        ) from None
    if listing.status != 200:
        raise GymbenchError(f"the NeMo Gym head server at {head_url} refused /server_instances (HTTP {listing.status})")
    instances = _json(head_url, "/server_instances", listing.body)
    servers = parse_server_instances(instances)
    directory = AgentDirectory(head_url, agents_from_instances(instances, head_url), servers)
    if not any(server.server_type == ENVIRONMENT_SERVER_TYPE for server in servers):
        return directory
    return _with_environments(directory, await read_global_config(client, head_url))


async def read_global_config(client: RetryingClient, head_url: str) -> JSONValue:
    """``GET /global_config_dict_yaml``: the merged config ``ng_run`` started from."""
    config = await client.reach(f"{head_url}/global_config_dict_yaml", "NeMo Gym head server")
    if config.status != 200:
        raise GymbenchError(
            f"the NeMo Gym head server at {head_url} refused /global_config_dict_yaml (HTTP {config.status}), "
            "which says which agent each environment server fronts; give +agent_url=http://HOST:PORT instead"
        )
    return _config_yaml(head_url, config.body)


def _with_environments(directory: AgentDirectory, config: Any) -> AgentDirectory:
    listed = {server.name: server.url for server in directory.servers if server.port is not None}
    environments, fronting = environment_servers_from_global_config(config, directory.head_url, listed)
    return dataclasses.replace(directory, environments=environments, fronting=fronting)


def environment_servers_from_global_config(
    config: Any, head_url: str, listed: Mapping[str, str] | None = None
) -> tuple[dict[str, EnvironmentServer], dict[str, tuple[str, ...]]]:
    """The config's environment servers by name, and for each agent those that front it, read as
    NeMo Gym 0.7.0 reads them (``_environment_servers_by_agent``, ``environment_server_agent_refs``):
    an agent reference is a field whose value has ``type: responses_api_agents``, or ``agent_server``
    without a type. A server's URL is the head server's listing of it (``listed``), else its config's."""
    environments: dict[str, EnvironmentServer] = {}
    fronting: dict[str, list[str]] = {}
    for name, block in config.items() if isinstance(config, Mapping) else ():
        implementations = block.get(ENVIRONMENT_SERVER_TYPE) if isinstance(block, Mapping) else None
        if not isinstance(implementations, Mapping) or not implementations:
            continue
        result_type, first = next(iter(implementations.items()))
        first = first if isinstance(first, Mapping) else {}
        url = (listed or {}).get(str(name)) or _agent_url(first.get("host"), first.get("port"), head_url)
        if url is not None:
            environments[str(name)] = EnvironmentServer(str(name), url.rstrip("/"), str(result_type))
        for server in implementations.values():
            for agent in _fronted_agents(server):
                fronting.setdefault(agent, []).append(str(name))
    return environments, {agent: tuple(names) for agent, names in fronting.items()}


def _fronted_agents(server: Any) -> list[str]:
    if not isinstance(server, Mapping):
        return []
    return [
        str(reference["name"])
        for key, reference in server.items()
        if isinstance(reference, Mapping)
        and (reference.get("type") == AGENT_SERVER_TYPE or (key == AGENT_REF_FIELD and reference.get("type") is None))
        and reference.get("name") is not None
    ]


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
