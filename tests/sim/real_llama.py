"""Start llama.cpp's ``llama-server`` with a chosen slot count, for calibration tests and benches.

The ``gymbench_llama_server`` fixture serves one configuration (4 slots); a calibration is checked
on two (slot-bound and compute-bound), so this starts its own. Skips (with the reason) when no
binary or model is at hand: ``GYMBENCH_LLAMA_SERVER`` / ``GYMBENCH_LLAMA_MODEL`` name them.
One compute thread (``-t 1``): the machines these run on are shared.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

BINARY = "/work/scratch/llama/build/bin/llama-server"
MODEL = "/work/scratch/llama/tiny.gguf"


def engine_files() -> tuple[str, str] | str:
    """(binary, model), or why they are not there."""
    binary = os.environ.get("GYMBENCH_LLAMA_SERVER", BINARY)
    model = os.environ.get("GYMBENCH_LLAMA_MODEL", MODEL)
    if not shutil.which(binary):
        return f"no llama-server binary at {binary} (set GYMBENCH_LLAMA_SERVER)"
    if not Path(model).is_file():
        return f"no GGUF model at {model} (set GYMBENCH_LLAMA_MODEL)"
    return binary, model


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_llama_server(slots: int, context: int = 8192, threads: int = 1) -> Iterator[str]:
    """The server's ``/v1`` URL while the block runs; the test is skipped when it cannot start."""
    found = engine_files()
    if isinstance(found, str):
        pytest.skip(f"no real engine: {found}")
    binary, model = found
    port = _free_port()
    log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)  # noqa: SIM115
    command = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-np", str(slots),
               "--cont-batching", "--metrics", "-c", str(context), "-t", str(threads), "-tb", str(threads)]  # fmt: skip
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_ready(port, process, Path(log.name))
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        os.unlink(log.name)


def _wait_ready(port: int, process: subprocess.Popen[bytes], log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-800:]
            pytest.fail(f"llama-server exited with {process.returncode}: {tail}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    pytest.fail(f"llama-server on port {port} not ready after {timeout_s:g} s")
