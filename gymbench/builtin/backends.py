"""The built-in backends' plugin: ``openai`` and ``nemo-gym``, with their options.

Registration is all this module does, so it imports nothing heavy: the backends themselves (and
aiohttp with them) are imported when a run creates one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from gymbench.hookspecs import hookimpl
from gymbench.settings import at_least, doc, one_of, positive_finite, require
from gymbench.types import Backend, Component

APIS = ("responses", "chat")
MAX_RETRIES_CAP = 100
DEFAULT_HEAD_SERVER = {"host": "127.0.0.1", "port": 11000}
"""Where NeMo Gym's head server listens unless its config says otherwise (``head_server.host/.port``)."""


@dataclass
class HttpSettings:
    """What every HTTP backend shares: timeouts, retries, the pool (NeMo Gym's names), the key."""

    request_timeout_s: float = field(default=300.0, metadata=doc("per-request timeout in seconds (> 0)"))
    connect_timeout_s: float = field(default=10.0, metadata=doc("connection timeout in seconds (> 0)"))
    max_retries: int = field(default=5, metadata=doc("retries on 429, 5xx and connection errors"))
    backoff_base_s: float = field(default=0.5, metadata=doc("first retry's backoff window"))
    backoff_cap_s: float = field(default=30.0, metadata=doc("largest backoff window"))
    global_aiohttp_connector_limit: int = field(default=65536, metadata=doc("connection pool size (0: no limit)"))
    global_aiohttp_connector_limit_per_host: int = field(
        default=16384, metadata=doc("pool size per host (0: no limit)")
    )
    preflight: bool = field(default=True, metadata=doc("check the server answers before the run starts"))
    api_key_env: str | None = field(default=None, metadata=doc("environment variable holding the API key"))

    def __post_init__(self) -> None:
        positive_finite("request_timeout_s", self.request_timeout_s)
        positive_finite("connect_timeout_s", self.connect_timeout_s)
        at_least("max_retries", self.max_retries, 0, MAX_RETRIES_CAP)
        at_least("backoff_base_s", self.backoff_base_s, 0.0, 3600.0)
        at_least("backoff_cap_s", self.backoff_cap_s, 0.0, 3600.0)
        at_least("global_aiohttp_connector_limit", self.global_aiohttp_connector_limit, 0)
        at_least("global_aiohttp_connector_limit_per_host", self.global_aiohttp_connector_limit_per_host, 0)


@dataclass
class OpenAISettings(HttpSettings):
    base_url: str | None = field(default=None, metadata=doc("OpenAI-compatible base URL, http://HOST:PORT/v1"))
    model: str | None = field(default=None, metadata=doc("model name sent with each request"))
    api: str = field(default="responses", metadata=doc("responses or chat"))
    stream: bool = field(default=False, metadata=doc("stream responses (measures time to first token)"))
    extra_body: dict[str, Any] = field(default_factory=dict, metadata=doc("fields added to every request body"))

    def __post_init__(self) -> None:
        super().__post_init__()
        one_of("api", self.api, APIS)


@dataclass
class NemoGymSettings(HttpSettings):
    agent_url: str | None = field(
        default=None, metadata=doc("the agent server, http://HOST:PORT (skips the head server: every row goes there)")
    )
    agent_name: str | None = field(
        default=None,
        metadata=doc("the agent for rows without an agent_ref, found through the NeMo Gym head server"),
    )
    head_server: dict[str, Any] = field(
        default_factory=dict,
        metadata=doc("NeMo Gym's head server, +head_server.host=H +head_server.port=P (default 127.0.0.1:11000)"),
    )
    base_url: str | None = field(default=None, metadata=doc("the agent server, when agent_url is not set"))

    def __post_init__(self) -> None:
        super().__post_init__()
        check_head_server(self.head_server)


def check_head_server(head_server: dict[str, Any]) -> None:
    """NeMo Gym's ``head_server`` block: only ``host`` and ``port``, and usable ones."""
    unknown = sorted(set(head_server) - set(DEFAULT_HEAD_SERVER))
    require(not unknown, "head_server", head_server, "only the keys host and port")
    host, port = head_server.get("host", "127.0.0.1"), head_server.get("port", 11000)
    require(isinstance(host, str) and bool(host.strip()), "head_server.host", host, "a host name or address")
    ok_port = isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536
    require(ok_port, "head_server.port", port, "a port number from 1 to 65535")


def make_openai(settings: OpenAISettings) -> Backend:
    from gymbench.builtin.openai_backend import OpenAIBackend

    return OpenAIBackend(dataclasses.asdict(settings))


def make_nemo_gym(settings: NemoGymSettings) -> Backend:
    from gymbench.builtin.nemo_gym_backend import NemoGymBackend

    return NemoGymBackend(dataclasses.asdict(settings))


@hookimpl
def gymbench_register_backends() -> list[Component]:
    return [
        Component(
            "openai",
            make_openai,
            "OpenAI-compatible HTTP server (vLLM, SGLang, OpenAI): Responses API or chat completions",
            settings=OpenAISettings,
        ),
        Component(
            "nemo-gym",
            make_nemo_gym,
            "NeMo Gym agent servers' /run, by +agent_name (through the head server) or +agent_url; the agent verifies",
            settings=NemoGymSettings,
        ),
    ]
