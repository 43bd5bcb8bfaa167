"""Start the simulated server in a subprocess on an ephemeral port, and stop it cleanly.

A separate process keeps the simulator's event loop off the CPU of the thing being measured.
The child prints its bound port once it listens; the parent waits for that line and for
``/health``, with a deadline, and stops the child with SIGTERM, then SIGKILL. Servers still
running when the interpreter exits are stopped too.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from gymbench.engine_metrics import answers_ok, fetch_metrics_text
from gymbench.errors import GymbenchError
from gymbench.sim.config import SimConfig, config_from_preset, slowed
from gymbench.sim.metrics import sample_values
from gymbench.sim.serve import READY_PREFIX

if TYPE_CHECKING:
    from gymbench.sim.capacity import Capacity

_LIVE: weakref.WeakSet[SimServerHandle] = weakref.WeakSet()


@dataclass(eq=False)
class SimServerHandle:
    process: subprocess.Popen[bytes]
    host: str
    port: int
    config: SimConfig
    stderr_file: IO[bytes]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def capacity(self) -> Capacity:
        """The engine's theoretical capacity (:class:`~gymbench.sim.capacity.Capacity`), for assertions."""
        from gymbench.sim.capacity import describe

        return describe(self.config)

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``.../v1``) a client is pointed at."""
        return f"{self.url}/v1"

    def metrics_text(self, timeout: float = 5.0) -> str:
        """``/metrics`` read within ``timeout`` in all (not per byte), and capped in size; a failure is
        a :class:`~gymbench.engine_metrics.ScrapeFailed` saying why."""
        return fetch_metrics_text(f"{self.url}/metrics", deadline_s=timeout)

    def metrics(self, timeout: float = 5.0) -> dict[str, float]:
        """Every sample as ``name{label="v",...}`` → value (``_total`` suffix kept for counters)."""
        return sample_values(self.metrics_text(timeout))

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, wait, SIGKILL if need be. Returns the exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        self.stderr_file.close()
        _LIVE.discard(self)
        return self.process.returncode

    def stderr_tail(self, limit: int = 2000) -> str:
        with contextlib.suppress(OSError, ValueError):
            self.stderr_file.flush()
            self.stderr_file.seek(0)
            return self.stderr_file.read().decode(errors="replace")[-limit:]
        return ""


def start_sim_server(
    config: SimConfig | None = None,
    *,
    preset: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    startup_timeout: float = 30.0,
    **overrides: Any,
) -> SimServerHandle:
    """Start a server; ``config`` wins, else ``preset`` plus ``overrides``."""
    cfg = config if config is not None else config_from_preset(preset, overrides)
    stderr_file = tempfile.TemporaryFile()
    command = [
        sys.executable,
        "-m",
        "gymbench.sim.serve",
        "--config-json",
        config_json(cfg),
        "--host",
        host,
        "--port",
        str(port),
        "--parent-pid",
        str(os.getpid()),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr_file, stdin=subprocess.DEVNULL)
    handle = SimServerHandle(process, host, 0, cfg, stderr_file)
    _LIVE.add(handle)
    try:
        handle.port = _read_port(process, startup_timeout)
        _wait_healthy(handle, startup_timeout)
    except BaseException as exc:
        tail = handle.stderr_tail()
        handle.stop()
        if isinstance(exc, GymbenchError):
            raise GymbenchError(f"{exc}\n--- simulator stderr ---\n{tail}") from None
        raise
    return handle


def config_json(config: SimConfig) -> str:
    """The configuration as the simulator process reads it (``SimConfig(**json.loads(...))``), checked
    here to come back the same: every setting takes this one road there, and one that JSON would
    change (``step_curve_s``'s integer keys become text) is an error in this process, not a
    traceback from that one."""
    text = json.dumps(config.to_dict())
    if SimConfig(**json.loads(text)) != config:
        raise GymbenchError("the simulator's configuration does not survive the way to its process (JSON)")
    return text


def _read_port(process: subprocess.Popen[bytes], timeout: float) -> int:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    buffer = b""
    while b"\n" not in buffer:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise GymbenchError(f"the simulated server did not start within {timeout:.0f}s")
        ready, _, _ = select.select([process.stdout], [], [], min(remaining, 0.5))
        if ready:
            chunk = os.read(process.stdout.fileno(), 4096)
            if not chunk:
                raise GymbenchError(f"the simulated server exited during start-up (code {process.wait()})")
            buffer += chunk
    line = buffer.split(b"\n", 1)[0].decode()
    if not line.startswith(READY_PREFIX):
        raise GymbenchError(f"unexpected start-up line from the simulated server: {line!r}")
    return int(line.split()[1])


def _wait_healthy(handle: SimServerHandle, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if answers_ok(f"{handle.url}/health"):
            return
        if time.monotonic() > deadline:
            raise GymbenchError(f"the simulated server at {handle.url} did not become healthy")
        time.sleep(0.05)


@contextlib.contextmanager
def running_sim_server(
    config: SimConfig | None = None, *, preset: str | None = None, **overrides: Any
) -> Iterator[SimServerHandle]:
    """``with running_sim_server(preset="vllm-like") as server: ... server.base_url ...``"""
    handle = start_sim_server(config, preset=preset, **overrides)
    try:
        yield handle
    finally:
        handle.stop()


@contextlib.contextmanager
def running_sim_replicas(
    config: SimConfig | None = None, *, replicas: int = 2, slow_replica_factor: float = 1.0, **overrides: Any
) -> Iterator[list[SimServerHandle]]:
    """``replicas`` simulated servers, the last one's steps ``slow_replica_factor`` times slower (a
    straggler): ``+base_url=[h.base_url for h in handles]`` spreads a run over them."""
    if replicas < 1 or not slow_replica_factor > 0:
        raise GymbenchError(
            f"running_sim_replicas: expected replicas >= 1 and slow_replica_factor > 0, got {replicas} and "
            f"{slow_replica_factor}; pass a count of servers and a step-time multiplier"
        )
    base = config if config is not None else config_from_preset(None, overrides)
    configs = [base] * (replicas - 1) + [slowed(base, slow_replica_factor)]
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(running_sim_server(each)) for each in configs]


@atexit.register
def _stop_leftovers() -> None:
    for handle in list(_LIVE):
        with contextlib.suppress(Exception):
            handle.stop(timeout=2)
