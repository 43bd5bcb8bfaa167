"""A NeMo-Gym-compatible agent stack on 127.0.0.1, so the ``nemo-gym`` backend is tested without NeMo Gym.

Agents (each with its own resources server) and a head server listing them
(:mod:`tests.nemo_gym.servers`), with gymbench's simulator as the model server. Run it in its own
process with ``python -m tests.nemo_gym.stack`` (prints one JSON line with the addresses, serves
until SIGTERM), or on a thread's event loop with :func:`running_stack`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from .servers import (
    AGENT_TYPE,
    ENVIRONMENT_TYPE,
    PARAM_DEFAULTS,
    RESOURCES_TYPE,
    AgentServer,
    EnvironmentServer,
    HeadServer,
    ResourcesServer,
    instance,
    normalise_params,
)

__all__ = ["PARAM_DEFAULTS", "AgentStack", "instance", "normalise_params", "running_stack", "stack_process"]
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class AgentStack:
    """Agents (each with its resources server) and a head server listing them, on one event loop."""

    model_base_url: str
    model: str = "gymbench-sim"
    agent_names: tuple[str, ...] = ("simple_agent",)
    legacy_head: bool = False
    aggregates: bool = True
    agent_settings: dict[str, Any] = field(default_factory=dict)
    """Passed to every :class:`AgentServer` (``concurrency``, ``overhead_s``)."""
    environment_servers: bool = False
    """Put a ``legacy_agent`` environment server in front of each agent, as NeMo Gym 0.7.0's ``ng_run`` does."""
    agents: dict[str, AgentServer] = field(default_factory=dict)
    environments: dict[str, EnvironmentServer] = field(default_factory=dict)
    """By agent name: the environment server in front of it."""
    resources: dict[str, ResourcesServer] = field(default_factory=dict)
    head: HeadServer = field(default_factory=HeadServer)
    head_port: int = 0
    _runners: list[web.AppRunner] = field(default_factory=list)

    @property
    def head_url(self) -> str:
        return f"http://127.0.0.1:{self.head_port}"

    def agent_url(self, name: str) -> str:
        return next(entry["url"] for entry in self.head.instances if entry["process_name"] == name)

    async def start(self) -> AgentStack:
        self.head.legacy = self.legacy_head
        for name in self.agent_names:
            resources = self.resources[name] = ResourcesServer(f"{name}_resources")
            resources_port = await self._serve(resources.app())
            resources_url = f"http://127.0.0.1:{resources_port}"
            agent = AgentServer(
                name, resources_url, self.model_base_url, self.model, aggregates=self.aggregates, **self.agent_settings
            )
            self.agents[name] = agent
            agent_port = await self._serve(agent.app())
            self.head.instances += [
                instance(name, AGENT_TYPE, "simple_agent", agent_port),
                instance(resources.name, RESOURCES_TYPE, "lookup_resources", resources_port),
            ]
            if self.environment_servers:
                await self.add_environment_server(f"{name}_environment_server", name)
        self.head_port = await self._serve(self.head.app())
        return self

    async def add_environment_server(self, process_name: str, *agents: str) -> EnvironmentServer:
        """A ``legacy_agent`` relay to the first of ``agents``, listed by the head server as fronting them all."""
        environment = EnvironmentServer(self.agent_url(agents[0]))
        port = await self._serve(environment.app())
        self.environments.setdefault(agents[0], environment)
        self.head.instances.append(instance(process_name, ENVIRONMENT_TYPE, "legacy_agent", port))
        self.head.fronted[process_name] = list(agents)
        return environment

    async def _serve(self, app: web.Application) -> int:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        self._runners.append(runner)
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner.addresses[0][1]

    async def stop(self) -> None:
        for runner in reversed(self._runners):
            await runner.cleanup()

    def addresses(self) -> dict[str, Any]:
        return {"head_port": self.head_port, "agents": {name: self.agent_url(name) for name in self.agents}}


def unused_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def running_stack(model_base_url: str, **settings: Any) -> Iterator[AgentStack]:
    """The stack on its own thread's event loop, for tests that run ``gymbench`` as a subprocess."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    thread = threading.Thread(target=lambda: (asyncio.set_event_loop(loop), ready.set(), loop.run_forever()))
    thread.start()
    ready.wait()
    stack = AgentStack(model_base_url, **settings)
    try:
        asyncio.run_coroutine_threadsafe(stack.start(), loop).result(timeout=30)
        yield stack
    finally:
        asyncio.run_coroutine_threadsafe(stack.stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


@contextlib.contextmanager
def stack_process(*arguments: str) -> Iterator[dict[str, Any]]:
    """The stack in a process of its own (its simulator a child of it): no GIL or CPU shared with
    the test. Yields the addresses it prints; stopped with SIGTERM."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.nemo_gym.stack", *arguments],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, "the agent stack did not start"
        yield json.loads(line)
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    """``python -m tests.nemo_gym.stack [--agents a,b] [--sim KEY=VALUE ...]``: the stack and its
    simulator in processes of their own, until SIGTERM; one JSON line of addresses on stdout."""
    from gymbench.sim import start_sim_server

    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", default="simple_agent")
    parser.add_argument("--dead-agent", default=None, help="also list an agent of this name that is not running")
    parser.add_argument("--environment-servers", action="store_true", help="an environment server before each agent")
    parser.add_argument("--agent", nargs="*", default=[], help="agent settings, KEY=VALUE (JSON values)")
    parser.add_argument("--sim", nargs="*", default=[], help="simulator settings, KEY=VALUE (JSON values)")
    args = parser.parse_args()
    sim = start_sim_server(**_key_values(args.sim))

    async def serve() -> None:
        names = tuple(args.agents.split(","))
        stack = await AgentStack(
            sim.base_url, sim.config.model, names, agent_settings=_key_values(args.agent),
            environment_servers=args.environment_servers,
        ).start()  # fmt: skip
        if args.dead_agent:
            stack.head.instances.append(instance(args.dead_agent, AGENT_TYPE, "simple_agent", unused_port()))
        print(json.dumps(stack.addresses()), flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await stack.stop()

    try:
        asyncio.run(serve())
    finally:
        sim.stop()
    sys.exit(0)


def _key_values(items: list[str]) -> dict[str, Any]:
    return {key: json.loads(value) for key, value in (item.split("=", 1) for item in items)}


if __name__ == "__main__":
    main()
