"""Start NeMo Gym's own stack (head server, agent, resources server, model adapter) with its own
launcher, ``ng_run``, on 127.0.0.1, with gymbench's simulator (or any OpenAI-compatible server) as
the model behind its ``openai_model`` adapter.

``ng_run`` gives every server a venv of its own, built with ``uv`` from the network; here every
server runs from the one NeMo Gym venv (:mod:`gymbench.engine.nemo_gym_venv`) instead: its
``uv_venv_dir`` holds, for each server folder, a ``.venv`` link to that venv, and
``skip_venv_if_present`` makes ``ng_run`` use it as it is. ``ng_run`` starts a local Ray cluster and
the servers as its children; it is started in a session of its own, so at the end every process of
that session (Ray's included) is stopped: first as NeMo Gym stops them (SIGINT), then by SIGKILL.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import orjson

from gymbench.engine_metrics import ScrapeFailed, fetch_metrics_text
from gymbench.errors import GymbenchError
from gymbench.server_instances import ServerInstance, parse_server_instances

EXAMPLE_RESOURCES_SERVER = "example_single_tool_call"
EXAMPLE_AGENT = "example_single_tool_call_simple_agent"
SERVER_FOLDERS = ("resources_servers", "responses_api_agents", "responses_api_models", "environment_servers")
STARTUP_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
POLL_S = 0.5
SERVER_LIST_MAX_BYTES = 4 * 1024 * 1024
"""The most of ``/server_instances`` (or ``/readyz``) read: a head server lists a few dozen servers."""
DROPPED_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
"""gymbench's own Python must not leak into NeMo Gym's (``ng_run`` adds ``PYTHONPATH`` to its servers')."""


@dataclass
class NeMoGymStack:
    """A running ``ng_run``: its head server, the agent to collect with, the model it calls."""

    head_url: str
    agent_name: str
    model_base_url: str
    venv: Path
    workdir: Path
    process: subprocess.Popen[bytes]
    startup_s: float = 0.0
    servers: tuple[ServerInstance, ...] = field(default=())
    remove_workdir: bool = False
    """The folder (config, venv links, ``ng_run.log``) is removed at a clean stop when it was made here."""

    @property
    def head_port(self) -> int:
        return int(self.head_url.rsplit(":", 1)[1])

    @property
    def log(self) -> Path:
        return self.workdir / "ng_run.log"

    def server(self, server_type: str) -> ServerInstance:
        return next(s for s in self.servers if s.server_type == server_type)

    def pids(self) -> dict[str, int]:
        return {s.name: s.pid for s in self.servers if s.pid is not None}

    def stop(self) -> None:
        stop_session(self.process)
        if self.remove_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> NeMoGymStack:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3.*/site-packages"))
    if not found:
        raise GymbenchError(f"NeMo Gym venv {venv}: no lib/python3.*/site-packages; rebuild it")
    return found[-1]


def example_config_paths(venv: Path) -> list[Path]:
    """The example stack: example_single_tool_call (its simple agent) and the openai_model adapter."""
    packages = site_packages(venv)
    return [
        packages / "resources_servers" / EXAMPLE_RESOURCES_SERVER / "configs" / f"{EXAMPLE_RESOURCES_SERVER}.yaml",
        packages / "responses_api_models" / "openai_model" / "configs" / "openai_model.yaml",
    ]


def example_tasks(venv: Path) -> Path:
    """The tasks the example resources server ships (5 rows)."""
    return site_packages(venv) / "resources_servers" / EXAMPLE_RESOURCES_SERVER / "data" / "example.jsonl"


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_nemo_gym_stack(
    venv: Path,
    model_base_url: str,
    model: str = "gymbench-sim",
    *,
    config_paths: Sequence[Path] | None = None,
    agent_name: str = EXAMPLE_AGENT,
    timeout_s: float = STARTUP_TIMEOUT_S,
    workdir: Path | None = None,
) -> NeMoGymStack:
    """``ng_run`` with ``config_paths`` (default: the example stack) and the model at ``model_base_url``;
    returns once the head server says every server is ready, or stops what started and raises."""
    folder = workdir or Path(tempfile.mkdtemp(prefix="gymbench-nemo-gym-"))
    overrides = _write_stack_config(folder, venv, model_base_url, model)
    paths = [*(config_paths or example_config_paths(venv)), overrides]
    command = [str(venv / "bin" / "ng_run"), f"+config_paths=[{','.join(str(p) for p in paths)}]"]
    started = time.monotonic()
    with open(folder / "ng_run.log", "wb") as log:
        process = subprocess.Popen(
            command, cwd=folder, env=_child_environment(venv), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    head_url = f"http://127.0.0.1:{_head_port(overrides)}"
    stack = NeMoGymStack(head_url, agent_name, model_base_url, venv, folder, process)
    try:
        _wait_until_ready(stack, timeout_s)
        stack.servers = read_servers(head_url)
    except BaseException:
        stack.stop()  # the folder stays: the error names its log
        raise
    stack.remove_workdir = workdir is None
    stack.startup_s = time.monotonic() - started
    return stack


def _write_stack_config(folder: Path, venv: Path, model_base_url: str, model: str) -> Path:
    """The overrides: the head server's port, the model, and one shared venv for every server."""
    venvs = folder / "venvs"
    packages = site_packages(venv)
    for kind in SERVER_FOLDERS:
        for server in sorted(p for p in (packages / kind).glob("*") if p.is_dir() and p.name != "__pycache__"):
            (venvs / kind / server.name).mkdir(parents=True, exist_ok=True)
            (venvs / kind / server.name / ".venv").symlink_to(venv)
    settings = {
        "head_server": {"host": "127.0.0.1", "port": unused_port()},
        "default_host": "127.0.0.1",
        "policy_base_url": model_base_url,
        "policy_api_key": "unused",
        "policy_model_name": model,
        "skip_venv_if_present": True,
        "uv_venv_dir": str(venvs),
    }
    path = folder / "gymbench_stack.yaml"
    path.write_bytes(orjson.dumps(settings))  # JSON is YAML
    return path


def _head_port(overrides: Path) -> int:
    return int(orjson.loads(overrides.read_bytes())["head_server"]["port"])


def _child_environment(venv: Path) -> dict[str, str]:
    """This environment less secrets and gymbench's Python, with NeMo Gym's venv first on PATH."""
    from gymbench.engine.server import without_secrets

    env = {k: v for k, v in without_secrets(dict(os.environ)).items() if k not in DROPPED_VARIABLES}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


def _wait_until_ready(stack: NeMoGymStack, timeout_s: float) -> None:
    """Poll the head server's ``/readyz`` (503 until every server and the model answer)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if stack.process.poll() is not None:
            raise GymbenchError(
                f"ng_run exited ({stack.process.returncode}) before its servers were ready: "
                f"{_last_lines(stack.log)}; full log: {stack.log}"
            )
        if _get(f"{stack.head_url}/readyz") is not None:
            return
        time.sleep(POLL_S)
    raise GymbenchError(
        f"NeMo Gym's servers were not ready within {timeout_s:g}s: {_last_lines(stack.log)}; full log: {stack.log}"
    )


def _get(url: str, timeout_s: float = 5.0) -> bytes | None:
    """The body of a 200 answer, or None (refused, not ready, timed out); read by the one bounded
    reader every health check and scrape uses, so a head server that trickles cannot hold it."""
    try:
        return fetch_metrics_text(url, timeout_s, SERVER_LIST_MAX_BYTES).encode()
    except ScrapeFailed:
        return None


def read_servers(head_url: str) -> tuple[ServerInstance, ...]:
    """``/server_instances``: NeMo Gym 0.7.0 lists each server's ``pid`` beside its host and port."""
    body = _get(f"{head_url}/server_instances")
    if body is None:
        raise GymbenchError(f"the NeMo Gym head server at {head_url} did not answer /server_instances")
    return parse_server_instances(orjson.loads(body))


def _last_lines(log: Path, count: int = 3) -> str:
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    return " | ".join(lines[-count:])[:600] or "(no output)"


def stop_session(process: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGINT to ``ng_run`` (it stops its servers and Ray), then SIGKILL whatever of its session is left."""
    session = process.pid
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + timeout_s
    while (left := session_members(session)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    if process.poll() is None:
        process.kill()
    process.wait(timeout_s)


def session_members(session: int) -> list[int]:
    """The live processes of session ``session`` (Linux ``/proc``; elsewhere only the leader is known)."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        stat = _stat_fields(entry / "stat")
        if stat is not None and int(stat[3]) == session and stat[0] != "Z":
            members.append(int(entry.name))
    return members


def _stat_fields(path: Path) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name: state, ppid, pgrp, session, ..., utime (11), stime (12)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()
