"""Issue 28: a ``/metrics`` that trickles bytes, or never ends, never holds up a scrape or a run.

Real servers on 127.0.0.1 (:mod:`.slow_metrics_server`): one byte a second after the headers, the
headers themselves one byte a second, and an endless fast body. Each scrape path (collect's watch,
tune's counter probe) ends by its deadline or its byte cap with one warning; a whole collection
against such a server writes every rollout. A thread or a subprocess timeout only catches a hang
(the old code never returned); nothing here measures time.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from gymbench.engine_metrics import ScrapeFailed, fetch_metrics_text, http_fetch, scrape

from .slow_metrics_server import SlowMetricsServer, slow_metrics_server

pytestmark = pytest.mark.hostile

HANG_S = 90
"""Far past any deadline used here: a call still running then has hung."""


@pytest.fixture(scope="module")
def server() -> Iterator[SlowMetricsServer]:
    with slow_metrics_server() as running:
        yield running


def _returns(call: Callable[[], Any]) -> Any:
    """``call()``'s value, or a failed test when it does not return at all."""
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(_outcome(call)), daemon=True)
    thread.start()
    thread.join(HANG_S)
    assert not thread.is_alive(), "the scrape hung"
    value, error = box[0]
    if error is not None:
        raise error
    return value


def _outcome(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return call(), None
    except BaseException as exc:  # noqa: BLE001 - handed back to the test's thread
        return None, exc


@pytest.mark.parametrize("mode", ["trickle_body", "trickle_head"])
def test_a_trickling_scrape_ends_at_its_deadline(server: SlowMetricsServer, mode: str) -> None:
    values, why = _returns(lambda: scrape(server.metrics_url(mode), deadline_s=0.5))
    assert values is None and why == f"{server.metrics_url(mode)} did not answer in full within 0.5 s; not scraped"


def test_an_endless_answer_stops_at_the_byte_cap(server: SlowMetricsServer) -> None:
    with pytest.raises(ScrapeFailed, match="answered more than 1 MiB; not metrics") as failed:
        _returns(lambda: fetch_metrics_text(server.metrics_url("endless"), deadline_s=HANG_S, max_bytes=1 << 20))
    assert failed.value.slow


def test_tunes_counter_probe_warns_once_and_reads_nothing(
    server: SlowMetricsServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("gymbench.engine_metrics.SCRAPE_DEADLINE_S", 0.3)
    fetch = http_fetch(server.metrics_url("trickle_body"))
    assert _returns(fetch) is None and _returns(fetch) is None
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("gymbench: warning:")]
    assert len(warnings) == 1 and "did not answer in full within 0.3 s" in warnings[0], warnings


CHILD = (
    "import sys, gymbench.engine_metrics as m, gymbench.cli as cli; m.SCRAPE_DEADLINE_S = 0.5; "
    "sys.exit(cli.main(sys.argv[1:]))"
)


@pytest.mark.parametrize("mode", ["trickle_body", "endless"])
def test_a_collection_against_a_trickling_metrics_server_writes_every_rollout(
    server: SlowMetricsServer, tmp_path: Path, mode: str
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(f'{{"responses_create_params": {{"input": "q{i}"}}}}\n' for i in range(6)))
    out = tmp_path / "out.jsonl"
    args = [
        "collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", f"+base_url={server.base_url(mode)}",
        "+model=m", "+verifier=none", "+save_results=false", "+progress=false",
    ]  # fmt: skip
    done = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr
    assert len(out.read_text().splitlines()) == 6
    assert "Traceback" not in done.stderr
    warnings = [line for line in done.stderr.splitlines() if "/metrics" in line and "warning" in line]
    assert len(warnings) == 1, done.stderr
    assert "the run goes on without the server's metrics" in warnings[0]


def _sim_handle(port: int) -> Any:
    """A simulator handle pointed at ``port`` (its process is never touched by these reads)."""
    from gymbench.sim import SimConfig
    from gymbench.sim.launcher import SimServerHandle

    return SimServerHandle(process=cast(Any, None), host="127.0.0.1", port=port, config=SimConfig(),
                           stderr_file=cast(Any, None))  # fmt: skip


def test_a_health_check_that_trickles_is_not_healthy(server: SlowMetricsServer) -> None:
    """``gymbench engine``'s ``/health`` poll: a status line sent a byte a second (200 in the end)
    is not a healthy server; each check ends by its total deadline, not after the last byte."""
    from gymbench.engine.server import _healthy

    health = server.metrics_url("trickle_head").replace("/metrics", "/health")
    assert _returns(lambda: _healthy(health)) is False


def test_the_simulators_start_up_wait_ends_against_a_trickling_health_check(server: SlowMetricsServer) -> None:
    from gymbench.errors import GymbenchError
    from gymbench.sim.launcher import _wait_healthy

    handle = _sim_handle(server.ports["trickle_head"])
    with pytest.raises(GymbenchError, match="did not become healthy"):
        _returns(lambda: _wait_healthy(handle, 0.5))


def test_the_simulator_handles_metrics_read_has_a_total_deadline(server: SlowMetricsServer) -> None:
    handle = _sim_handle(server.ports["trickle_body"])
    with pytest.raises(ScrapeFailed, match="did not answer in full within 3 s") as failed:
        _returns(lambda: handle.metrics_text(timeout=3))  # a byte a second: never 3 s without one
    assert failed.value.slow
