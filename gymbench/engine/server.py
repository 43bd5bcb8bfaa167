"""Run ``llama-server`` on 127.0.0.1 for as long as a ``with`` block (or a command) needs it.

Continuous batching over ``slots`` slots, each with the model's whole context, Prometheus
``/metrics`` on, and a bounded wait for ``/health``: a server that dies while loading is an error
carrying its last log lines, never a hang.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from gymbench.engine_metrics import answers_ok
from gymbench.errors import GymbenchError

MODEL_ALIAS = "gymbench-tiny"
"""The model name the server answers to (``+model=...``), whatever the file is called."""
READY_TIMEOUT_S = 180.0
READY_REPORTS = 6
"""Lines said while waiting for ``/health`` (one each 30 s of the default 180 s): a slow model load
is not a hang, and a wait that will end in an error says so before it does."""
HTTP_THREADS = 256
"""llama-server --threads-http: above any parallelism a tune tries (see server_command)."""


@dataclass
class LlamaServer:
    """A running ``llama-server``: where to reach it and how to stop it."""

    host: str
    port: int
    slots: int
    model: str
    process: subprocess.Popen[bytes]
    log_path: Path
    _log_dir: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, for ``+base_url=``."""
        return self.root_url + "/v1"

    @property
    def metrics_url(self) -> str:
        return self.root_url + "/metrics"

    def collect_command(self) -> str:
        """A ready-to-paste ``gymbench collect`` line against this server."""
        return (
            f"gymbench collect +backend=openai +base_url={self.base_url} +model={self.model} +api=chat "
            "+input_jsonl_fpath=gymbench/data/example_tasks.jsonl +output_jsonl_fpath=rollouts.jsonl "
            f"+num_samples_in_parallel={self.slots}"
        )

    def tune_command(self) -> str:
        """A ready-to-paste ``gymbench tune`` line: a short sweep around the slot count."""
        return (
            f"gymbench tune +backend=openai +base_url={self.base_url} +model={self.model} +api=chat "
            "+input_jsonl_fpath=gymbench/data/example_tasks.jsonl"
        )

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(line.strip() for line in text.splitlines()[-lines:] if line.strip()) or "(no output)"

    def stop(self, grace_s: float = 10.0) -> None:
        """Terminate, then kill what is still there after ``grace_s``."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log_dir is not None:
            self._log_dir.cleanup()
            self._log_dir = None

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def replicas_command(servers: list[LlamaServer]) -> tuple[str, str]:
    """Ready-to-paste ``gymbench collect`` and ``tune`` lines over several replicas (``+base_url=[A, B]``)."""
    urls = "[" + ",".join(server.base_url for server in servers) + "]"
    slots = sum(server.slots for server in servers)
    common = f"+backend=openai '+base_url={urls}' +model={servers[0].model} +api=chat "
    tasks = "+input_jsonl_fpath=gymbench/data/example_tasks.jsonl"
    return (
        f"gymbench collect {common}{tasks} +output_jsonl_fpath=rollouts.jsonl +num_samples_in_parallel={slots}",
        f"gymbench tune {common}{tasks}",
    )


def server_command(
    binary: Path,
    model: Path,
    *,
    host: str,
    port: int,
    slots: int,
    threads: int,
    context: int,
    max_tokens: int,
    http_threads: int = HTTP_THREADS,
) -> list[str]:
    """Each of ``slots`` slots gets ``context`` tokens: llama.cpp divides ``-c`` among them.

    ``--threads-http``: llama-server's default is max(slots + 4, cores - 1) HTTP threads, and each
    keeps its keep-alive connection for up to 5 s. A client holding more connections than that
    (any parallelism above it) has some requests wait for a thread: measured here at -np 4 and
    parallelism 16, p99 latency 7 s instead of 0.2 s and 3.7x less throughput."""
    return [
        str(binary), "-m", str(model), "--alias", MODEL_ALIAS, "--host", host, "--port", str(port),
        "-np", str(slots), "--cont-batching", "--metrics", "-c", str(context * slots), "-t", str(threads),
        "-n", str(max_tokens), "--threads-http", str(http_threads),
    ]  # fmt: skip


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, the kernel sends it SIGTERM when its parent dies.

    A ``gymbench engine`` or pytest session killed with SIGKILL runs no clean-up of its own; without
    this its llama-server would go on serving (and holding a core) with nobody to stop it."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def start_llama_server(
    binary: Path,
    model: Path,
    *,
    slots: int = 4,
    threads: int = 1,
    port: int = 0,
    context: int = 4096,
    max_tokens: int = 128,
    http_threads: int = HTTP_THREADS,
    host: str = "127.0.0.1",
    log_path: Path | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> LlamaServer:
    """Start the server and return once ``/health`` says ok (``port`` 0: a free one).

    The log goes to ``log_path`` (default: a temporary file removed when the server stops)."""
    log_dir = None
    if log_path is None:
        log_dir = tempfile.TemporaryDirectory(prefix="gymbench-llama-server-")
        log_path = Path(log_dir.name) / "llama-server.log"
    port = port or free_port(host)
    command = server_command(
        binary,
        model,
        host=host,
        port=port,
        slots=slots,
        threads=threads,
        context=context,
        max_tokens=max_tokens,
        http_threads=http_threads,
    )
    with open(log_path, "wb") as log:
        try:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
                env=server_environment(),
            )  # fmt: skip
        except OSError as exc:
            raise GymbenchError(f"cannot start {binary} ({exc.strerror or exc})") from None
    server = LlamaServer(host, port, slots, MODEL_ALIAS, process, log_path, log_dir)
    print(f"gymbench: started {binary.name}; waiting up to {ready_timeout_s:g} s for {server.root_url}/health "
          f"(log: {log_path})", file=sys.stderr)  # fmt: skip
    try:
        wait_until_ready(server, ready_timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


def free_port(host: str = "127.0.0.1") -> int:
    try:
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])
    except OSError as exc:  # socket.gaierror included: a name that does not resolve
        raise GymbenchError(
            f"--host {host}: cannot listen there ({exc.strerror or exc}); pass an address of this machine, "
            "such as 127.0.0.1"
        ) from None


SERVER_ENV_KEPT = ("PATH", "HOME", "TMPDIR", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH")
"""What llama-server is given of gymbench's environment, besides ``LC_*`` and the accelerators'
device choice (``CUDA_VISIBLE_DEVICES`` and the like). Everything else stays behind: an
``OPENAI_API_KEY`` (or any key) the user exported for gymbench is not the server's to read,
and llama-server itself reads ``LLAMA_ARG_*`` and ``LLAMA_API_KEY`` from its environment, which
would change the server the command line describes."""
_DEVICE_CHOICE = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GGML_VK_VISIBLE_DEVICES")


SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
"""A variable whose name says it holds a secret is given to no child process, whatever else it is."""


def server_environment() -> dict[str, str]:
    kept = SERVER_ENV_KEPT + _DEVICE_CHOICE
    chosen = {name: value for name, value in os.environ.items() if name in kept or name.startswith("LC_")}
    return without_secrets(chosen)


def without_secrets(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` less the variables named like secrets (the build's tools need the rest: a proxy,
    pip's index, the compiler's flags)."""
    return {name: value for name, value in environ.items() if not SECRET_NAME.search(name)}


def wait_until_ready(
    server: LlamaServer,
    timeout_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    say: Callable[[str], None] = lambda text: print(f"gymbench: {text}", file=sys.stderr),
) -> None:
    """Poll ``/health`` (503 while the model loads, 200 once it serves) until ``timeout_s``, saying
    how long it has waited now and then (``clock`` and ``sleep``: a test's simulated time)."""
    url = server.root_url + "/health"
    started = clock()
    every = max(timeout_s / READY_REPORTS, min(30.0, timeout_s / 2))
    reported = 0
    while (waited := clock() - started) < timeout_s:
        status = server.process.poll()
        if status is not None:
            raise GymbenchError(
                f"llama-server exited with status {status} before it was ready; its last lines: {server.log_tail()}"
            )
        if _healthy(url):
            return
        if waited >= every * (reported + 1):
            reported = int(waited // every)
            say(f"still waiting for {url} ({waited:.0f} s of {timeout_s:g} s; the model may still be loading)")
        sleep(0.2)
    raise GymbenchError(
        f"llama-server was not ready after {timeout_s:g} s: {url} never answered ok (is the binary listening "
        f"elsewhere? it was given --host {server.host} --port {server.port}); its last lines: {server.log_tail()}"
    )


def _healthy(url: str) -> bool:
    """One ``/health`` check with a total deadline (a trickling answer ends it; see :func:`answers_ok`)."""
    return answers_ok(url)
