"""Run the simulated server in this process: ``python -m gymbench.sim.serve --config-json '{...}'``.

This is what :func:`gymbench.sim.launcher.start_sim_server` starts in a subprocess, and what
``gymbench sim-server`` runs in the foreground. A child started by a launcher exits when its
parent dies (``PR_SET_PDEATHSIG`` on Linux, and a watch on the parent pid everywhere), so a
crashed test leaves no orphan server behind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from aiohttp import web

from gymbench.settings import ServerAddress, add_settings_flags, doc, settings_from_flags
from gymbench.sim.config import SimConfig
from gymbench.sim.server import SimServer

READY_PREFIX = "GYMBENCH_SIM_READY"
PARENT_POLL_S = 0.5


STOP_GRACE_S = 2.0
"""How long answers in flight may finish once the server is told to stop (Ctrl-C, SIGTERM) before
they are cut: aiohttp's default waited a minute, so a server in a minute-long simulated step took a
minute to stop after Ctrl-C, and a second Ctrl-C was a traceback."""


async def serve(
    config: SimConfig,
    host: str,
    port: int,
    on_ready: Callable[[int], None],
    stop: asyncio.Event,
) -> None:
    runner = web.AppRunner(
        SimServer(config).app(), access_log=None, handle_signals=False, shutdown_timeout=STOP_GRACE_S
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=8192, reuse_address=True)
    await site.start()
    bound_port = runner.addresses[0][1]
    on_ready(bound_port)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def install_fast_loop() -> None:
    """uvloop when installed: the simulator must not be the bottleneck it helps to find."""
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


async def _watch_parent(parent: int, stop: asyncio.Event) -> None:
    while not stop.is_set():
        if os.getppid() != parent:
            stop.set()
            return
        await asyncio.sleep(PARENT_POLL_S)


async def run_child(config: SimConfig, host: str, port: int, parent: int | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = loop.create_task(_watch_parent(parent, stop)) if parent else None

    def announce(bound: int) -> None:
        print(f"{READY_PREFIX} {bound}", flush=True)

    await serve(config, host, port, announce, stop)
    if watcher is not None:
        watcher.cancel()


@dataclass(frozen=True)
class ChildSettings(ServerAddress):
    """The command line :func:`gymbench.sim.launcher.start_sim_server` gives its child."""

    config_json: str = field(default="{}", metadata=doc("the simulator's settings (SimConfig) as JSON"))
    parent_pid: int | None = field(default=None, metadata=doc("exit when this process (the launcher) is gone"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gymbench.sim.serve")
    add_settings_flags(parser, ChildSettings)
    settings = settings_from_flags(ChildSettings, parser.parse_args(argv))
    if settings.parent_pid:
        die_with_parent()
        if os.getppid() != settings.parent_pid:
            return 0
    config = SimConfig(**json.loads(settings.config_json))
    install_fast_loop()
    asyncio.run(run_child(config, settings.host, settings.port, settings.parent_pid))
    return 0


if __name__ == "__main__":
    sys.exit(main())
