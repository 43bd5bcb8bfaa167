"""The built-in backends' settings, each declared once, in groups that schemas combine.

:class:`ConnectionSettings` (timeouts, retries, the pool, the key), :class:`OpenAIServer` and
:class:`NemoGymAgent` are the groups the server commands offer flat on their command line
(``ServerConfig`` inherits them); each backend's schema is the same groups plus what only that
backend takes. The backends and the registration module import this module; it imports nothing
but the settings checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gymbench.errors import GymbenchError
from gymbench.secrets import secret_from_env
from gymbench.settings import Checked, at_least, doc, one_of, positive_finite, require

APIS = ("responses", "chat")
ROUTING_POLICIES = ("sticky", "round-robin", "least-in-flight")
"""How requests spread over several ``base_url`` s (:mod:`gymbench.builtin.routing`)."""
MAX_RETRIES_CAP = 100
DEFAULT_HEAD_SERVER = {"host": "127.0.0.1", "port": 11000}
"""Where NeMo Gym's head server listens unless its config says otherwise (``head_server.host/.port``)."""


@dataclass
class ConnectionSettings(Checked):
    """What every HTTP backend shares and every server command offers: timeout, retries, pool, key."""

    request_timeout_s: float = field(
        default=300.0, metadata=doc("per-request timeout in seconds (> 0)", run_neutral=True)
    )
    max_retries: int = field(default=5, metadata=doc("retries on 429, 5xx and connection errors", run_neutral=True))
    global_aiohttp_connector_limit: int = field(
        default=65536, metadata=doc("connection pool size (0: no limit)", run_neutral=True)
    )
    global_aiohttp_connector_limit_per_host: int = field(
        default=16384, metadata=doc("pool size per host (0: no limit)", run_neutral=True)
    )
    api_key_env: str | None = field(
        default=None, metadata=doc("environment variable holding the API key", run_neutral=True)
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        positive_finite("request_timeout_s", self.request_timeout_s)
        at_least("max_retries", self.max_retries, 0, MAX_RETRIES_CAP)
        at_least("global_aiohttp_connector_limit", self.global_aiohttp_connector_limit, 0)
        at_least("global_aiohttp_connector_limit_per_host", self.global_aiohttp_connector_limit_per_host, 0)
        # Known to the redaction filter in every process that reads these settings, not only in the
        # one that sends the key: a sharded run's driver prints what its workers' servers said.
        secret_from_env(self.api_key_env)


@dataclass
class HttpSettings(ConnectionSettings):
    """Every HTTP backend's settings: the shared ones, plus the connect timeout, backoff and preflight."""

    connect_timeout_s: float = field(default=10.0, metadata=doc("connection timeout in seconds (> 0)"))
    backoff_base_s: float = field(default=0.5, metadata=doc("first retry's backoff window"))
    backoff_cap_s: float = field(default=30.0, metadata=doc("largest backoff window"))
    preflight: bool = field(default=True, metadata=doc("check the server answers before the run starts"))

    def __post_init__(self) -> None:
        super().__post_init__()
        positive_finite("connect_timeout_s", self.connect_timeout_s)
        at_least("backoff_base_s", self.backoff_base_s, 0.0, 3600.0)
        at_least("backoff_cap_s", self.backoff_cap_s, 0.0, 3600.0)


@dataclass
class OpenAIServer(Checked):
    """Where an OpenAI-compatible server is and how it is asked."""

    base_url: str | list[str] | None = field(
        default=None,
        metadata=doc(
            "OpenAI-compatible base URL, e.g. http://HOST:PORT/v1, or a list of replicas' "
            "([http://A/v1, http://B/v1]: requests spread over them by +routing)",
            run_neutral=True,
        ),
    )
    routing: str = field(
        default="sticky",
        metadata=doc(
            "with several base_url: sticky (each rollout on one replica), round-robin or least-in-flight",
            run_neutral=True,
        ),
    )
    model: str | None = field(default=None, metadata=doc("model name sent with each request"))
    api: str = field(default="responses", metadata=doc("responses or chat"))
    stream: bool = field(default=False, metadata=doc("stream responses (measures time to first token)"))
    extra_body: dict[str, Any] = field(default_factory=dict, metadata=doc("fields added to every request body"))

    def endpoint(self) -> str:
        """``base_url`` without its trailing slash; the one check that a server is named, with the one
        message that says how (when no server is named, the simulator's address is laid in first)."""
        return self.endpoints()[0]

    def endpoints(self) -> list[str]:
        """Every replica's ``base_url`` (one, unless a list names several), each checked as one is."""
        given = self.base_url if isinstance(self.base_url, list) else [self.base_url]
        urls = [self._checked(url) for url in given] if given else [self._checked(None)]
        if len(set(urls)) < len(urls):
            raise GymbenchError(
                f"+base_url names a replica twice ({self.base_url!r}); list each server once "
                "(give a server more parallelism with +num_samples_in_parallel)"
            )
        return urls

    def _checked(self, given: str | None) -> str:
        url = (given or "").strip() if isinstance(given, str) or given is None else ""
        if not url.startswith(("http://", "https://")):
            shown = f", got {given!r}" if given else ""
            raise GymbenchError(f"the openai backend needs +base_url=http://HOST:PORT/v1 (the server's address){shown}")
        self._one_authorization(url)
        return url.rstrip("/")

    def _one_authorization(self, url: str) -> None:
        """Credentials in the URL (basic auth) and an API key (a bearer token) would be two
        ``Authorization`` headers: aiohttp refused with a ValueError traceback on the first request."""
        from urllib.parse import urlsplit

        if not urlsplit(url).username:
            return
        variable = getattr(self, "api_key_env", None) or "OPENAI_API_KEY"
        if secret_from_env(variable):
            raise GymbenchError(
                f"+base_url carries credentials (user:password@) and {variable} holds an API key: a request has "
                f"one Authorization header; take the credentials out of +base_url, or unset {variable}"
            )


@dataclass
class NemoGymAgent(Checked):
    """Which NeMo Gym agent serves the rows: by URL, or by name through the head server."""

    agent_url: str | None = field(
        default=None, metadata=doc("NeMo Gym agent server, http://HOST:PORT (every row goes there)")
    )
    agent_name: str | None = field(
        default=None,
        metadata=doc(
            "NeMo Gym agent for every row (overriding a row's agent_ref, with a warning, as NeMo Gym 0.7.0), "
            "found through the head server (+head_server.host=H +head_server.port=P, default 127.0.0.1:11000)",
            flags=("-a", "--agent", "--agent-name"),
            metavar="NAME",
        ),
    )
    head_server: dict[str, Any] = field(
        default_factory=dict,
        metadata=doc(
            "NeMo Gym's head server, +head_server.host=H +head_server.port=P (default 127.0.0.1:11000)",
            run_neutral=True,
        ),
    )
    environment_routing_mode: str = field(
        default="agent",
        metadata=doc(
            "NeMo Gym 0.7.0's routing of rows: agent (each through its agent's environment server) or legacy "
            "(every row to +environment_server_name)"
        ),
    )
    environment_server_name: str | None = field(
        default=None, metadata=doc("the environment server every row goes to with environment_routing_mode=legacy")
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_head_server(self.head_server)
        if self.environment_routing_mode == "taskset":
            raise GymbenchError(
                "environment_routing_mode=taskset is NeMo Gym's routing of materialized tasks (task_id.taskset with "
                "task_input), which gymbench does not offer: give flat rows, routed by agent (the default) or legacy"
            )
        one_of("environment_routing_mode", self.environment_routing_mode, ("agent", "legacy"))
        legacy = self.environment_routing_mode == "legacy"
        if legacy and self.agent_url:
            raise GymbenchError(
                "+agent_url sends every row to that server as it is, so +environment_routing_mode=legacy has no "
                "environment server to route to: give one of them"
            )
        if legacy and not self.environment_server_name:  # without legacy the name is unused, as in NeMo Gym 0.7.0
            raise GymbenchError(
                "+environment_routing_mode=legacy sends every row to one environment server: name it with "
                "+environment_server_name=NAME (as NeMo Gym 0.7.0 requires), or leave the mode out to route by agent"
            )


@dataclass
class OpenAISettings(HttpSettings, OpenAIServer):
    """The ``openai`` backend's settings."""

    def __post_init__(self) -> None:
        super().__post_init__()
        one_of("api", self.api, APIS)
        one_of("routing", self.routing, ROUTING_POLICIES)


@dataclass
class NemoGymSettings(HttpSettings, NemoGymAgent):
    """The ``nemo-gym`` backend's settings; ``base_url`` is the agent server when ``agent_url`` is not set."""

    base_url: str | None = field(default=None, metadata=doc("the agent server, when agent_url is not set"))


def check_head_server(head_server: dict[str, Any]) -> None:
    """NeMo Gym's ``head_server`` block: only ``host`` and ``port``, and usable ones."""
    unknown = sorted(set(head_server) - set(DEFAULT_HEAD_SERVER))
    require(not unknown, "head_server", head_server, "only the keys host and port")
    host, port = head_server.get("host", "127.0.0.1"), head_server.get("port", 11000)
    require(isinstance(host, str) and bool(host.strip()), "head_server.host", host, "a host name or address")
    ok_port = isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536
    require(ok_port, "head_server.port", port, "a port number from 1 to 65535")
