"""The real llama.cpp server's ``/metrics``: recognised as llama.cpp, its queue and token counters read.

Uses the ``gymbench_llama_server`` fixture where it is installed; otherwise a server started from
``GYMBENCH_LLAMA_SERVER`` (the binary) and ``GYMBENCH_LLAMA_MODEL`` (a GGUF). Skipped, with the
reason, when neither is there.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from gymbench.engine_metrics import ServerWatch, find_server_counters
from gymbench.plugins import Plugins, get_plugin_manager

pytestmark = pytest.mark.real_engine
BUILTINS = Plugins(get_plugin_manager(load_entry_points=False)).engine_metrics()


@dataclass
class Started:
    base_url: str
    slots: int = 2


@pytest.fixture(scope="module")
def llama(request: pytest.FixtureRequest) -> Iterator[object]:
    try:
        yield request.getfixturevalue("gymbench_llama_server")
        return
    except pytest.FixtureLookupError:
        pass
    binary, model = os.environ.get("GYMBENCH_LLAMA_SERVER", ""), os.environ.get("GYMBENCH_LLAMA_MODEL", "")
    if not (binary and Path(binary).is_file() and model and Path(model).is_file()):
        pytest.skip("no real engine: no gymbench_llama_server fixture, and GYMBENCH_LLAMA_SERVER/_MODEL name no files")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-np", "2", "--cont-batching",
            "--metrics", "-c", "2048", "-t", "1", "-n", "16"]  # fmt: skip
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/health", server)
        yield Started(f"http://127.0.0.1:{port}/v1")
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_healthy(url: str, server: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        if server.poll() is not None:
            pytest.skip(f"no real engine: llama-server exited with {server.returncode} at start-up")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    pytest.skip("no real engine: llama-server did not become healthy")


def _complete(base_url: str) -> int:
    body = json.dumps({"prompt": "One two three", "max_tokens": 64, "ignore_eos": True}).encode()
    request = urllib.request.Request(f"{base_url}/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        return int(json.load(answer)["usage"]["completion_tokens"])


def test_llamacpp_is_recognised_and_its_counters_read(llama: object) -> None:
    base_url = str(getattr(llama, "base_url"))  # noqa: B009 - the fixture's object or ours
    found = find_server_counters(base_url, BUILTINS)
    assert found.record["engine"] == "llamacpp", found.record
    assert found.counters is not None
    reading = found.counters.read()
    assert reading is not None and reading.waiting is not None  # requests_deferred
    assert reading.generation_tokens is None  # counted at request end: throughput comes from the client
    requests = 3 * int(getattr(llama, "slots", 2))  # more requests than slots: the rest are deferred
    with ServerWatch(base_url, interval_s=0.1, engines=BUILTINS) as watch:
        with ThreadPoolExecutor(requests) as pool:
            generated = sum(pool.map(lambda _: _complete(base_url), range(requests)))
    record = watch.record()
    shown = {item["key"]: item["value"] for item in record["highlights"]}
    assert record["engine"] == "llamacpp" and record["unreadable"] == ["kv_cache"] and generated > 0
    assert shown["generated_tokens"] == generated  # every request had finished by the last scrape
    assert shown["running"] == 0 and shown["waiting"] == 0  # requests_processing, requests_deferred: all done
    assert all(set(point) >= {"t_s", "running", "waiting"} for point in record["over_time"])
    assert shown["prompt_tokens"] >= 0  # excludes prompt tokens served from llama.cpp's cache
    assert "kv_cache" not in shown  # current llama.cpp exposes no KV-cache gauge
