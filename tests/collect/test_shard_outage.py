"""A model-server outage during a sharded collect costs retries, not the run: shards stopped by it
(the circuit breaker, or a server unreachable at a shard's start) wait for the server and resume
without spending attempts; an outage that outlasts the driver's patience ends the run with exit 1
(stopped early), never 2 (bad input). The end-to-end test stops and restarts a real simulated server
on 127.0.0.1, the outage driven by what the run reports rather than by sleeps."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gymbench.collect import sharded
from gymbench.collect.shard_events import ShardEvent
from gymbench.collect.shard_worker import ShardJob, ShardOutcome
from gymbench.rollout.guard import FailureBreaker
from gymbench.types import GenerationFailed

from ..rollout.test_dataset import write_tasks
from .test_collect_cli import rows
from .test_sharded_collect import collect_args, pairs

pytestmark = pytest.mark.hostile  # a case of the adversarial sweep (issue 24): benches/hostile_count.sh

SIM = ["--step-base-s", "0.01", "--step-per-seq-s", "0", "--output-tokens-mean", "8"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_sim(port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen([sys.executable, "-m", "gymbench.cli", "sim-server", "--port", str(port), *SIM],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return server
        assert server.poll() is None and time.monotonic() < deadline, "the simulator did not start"
        time.sleep(0.02)


def _wait_for(predicate: Any, driver: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 120
    while not predicate():
        assert driver.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"no {what}"
        time.sleep(0.02)


def test_a_sharded_run_rides_out_a_server_outage_and_every_pair_is_a_row_once(tmp_path: Path) -> None:
    port = _free_port()
    tasks = write_tasks(tmp_path / "tasks.jsonl", 160)
    out, log = tmp_path / "out.jsonl", tmp_path / "stderr.txt"
    server = _start_sim(port)
    args = collect_args(tasks, out, "+num_workers=2", "+num_shards=4", "+save_results=false",
                        f"+base_url=http://127.0.0.1:{port}/v1", "+model=gymbench-sim")  # fmt: skip
    with open(log, "w") as stderr:
        driver = subprocess.Popen([sys.executable, "-m", "gymbench.cli", *args], stderr=stderr, text=True)
    try:
        shards = tmp_path / "out.jsonl.shards"
        _wait_for(lambda: sum(p.read_text().count("\n") for p in shards.glob("shard-*.jsonl")) >= 20, driver,
                  "rows before the outage")  # fmt: skip
        server.kill()
        server.wait()
        _wait_for(lambda: "the model server is down" in log.read_text(), driver, "shard stopped by the outage")
        server = _start_sim(port)
        assert driver.wait(timeout=180) == 0, log.read_text()
    finally:
        server.kill()
        driver.kill()
    err = log.read_text()
    assert "Traceback" not in err and "gymbench: error" not in err, err
    assert "no attempt spent" in err
    assert sorted(pairs(out)) == [(t, 0) for t in range(160)]
    assert {row["status"] for row in rows(out)} == {"ok"}  # what failed while it was down was retried


# The driver's circuit, with a launcher that answers from a script and a clock the test moves.


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _ScriptedLauncher:
    """Every shard run ends with the next outcome of its script; each poll moves the clock on."""

    name, num_workers, rows_travel_by = "scripted", 1, "nowhere"

    def __init__(self, clock: _Clock, script: dict[int, list[tuple[str | None, bool, bool]]], step_s: float) -> None:
        self.clock, self.script, self.step_s = clock, script, step_s
        self.running: list[ShardJob] = []
        self.started: list[tuple[int, float]] = []

    def start(self) -> None: ...

    def close(self) -> None: ...

    def free_slots(self) -> int:
        return 1 - len(self.running)

    def busy(self) -> bool:
        return bool(self.running)

    def submit(self, job: ShardJob) -> None:
        self.started.append((job.index, self.clock.now))
        self.running.append(job)

    def poll(self, timeout: float) -> list[ShardEvent]:
        self.clock.now += self.step_s
        if not self.running:
            return []
        job = self.running.pop()
        error, retryable, outage = self.script[job.index].pop(0)
        outcome = ShardOutcome(job.index, job.attempt, {}, error=error, retryable=retryable, outage=outage)
        return [ShardEvent("done", job.index, outcome=outcome)]


Script = dict[int, list[tuple[str | None, bool, bool]]]


def _drive(script: Script, step_s: float = 0.5) -> tuple[Any, _ScriptedLauncher]:
    clock = _Clock()
    launcher = _ScriptedLauncher(clock, script, step_s)
    driver = sharded._Driver([ShardJob(index, 0, {}) for index in sorted(script)], 3, clock=clock)
    driver.run(launcher)
    return driver, launcher


DOWN = ("server down", True, True)
OK = (None, True, False)
BROKEN = ("a plugin raised", True, False)


@pytest.mark.parametrize("outages", [1, 2, 3, 5, 8, 12])
def test_outage_reruns_spend_no_attempt_and_back_off(outages: int) -> None:
    driver, launcher = _drive({0: [DOWN] * outages + [OK]})
    assert not driver.unfinished and driver.tries[0] == outages + 1 and driver.outage_reruns[0] == outages
    waits = [b[1] - a[1] for a, b in zip(launcher.started, launcher.started[1:], strict=False)]
    assert all(later >= earlier for earlier, later in zip(waits, waits[1:], strict=False))  # never shorter
    assert max(waits) <= sharded.OUTAGE_LONGEST_WAIT_S + 1 and waits[0] >= sharded.OUTAGE_FIRST_WAIT_S


@pytest.mark.parametrize("shards", [2, 3, 5])
def test_one_outage_seen_by_many_shards_holds_them_all_and_backs_off_once(shards: int) -> None:
    driver, launcher = _drive({index: [DOWN, OK] for index in range(shards)}, step_s=0.01)
    assert not driver.unfinished
    assert driver.backoff_s == 0.0  # closed again once a shard finished


def test_an_outage_past_the_patience_spends_attempts_and_the_run_stops_with_exit_1() -> None:
    driver, _ = _drive({0: [DOWN] * 200}, step_s=5.0)
    assert 0 in driver.unfinished and driver.tries[0] - driver.outage_reruns[0] == 3
    assert sharded._stopped(_config(), Path("o.jsonl"), driver.unfinished, False) == 1


@pytest.mark.parametrize("failures", [1, 2])
def test_other_failures_still_spend_attempts(failures: int) -> None:
    driver, _ = _drive({0: [BROKEN] * failures + [OK]})
    assert not driver.unfinished and driver.outage_reruns[0] == 0 and driver.tries[0] == failures + 1


def _config() -> Any:
    from gymbench.collect.config import CollectConfig
    from gymbench.settings import build_settings

    return build_settings(CollectConfig, [])


@pytest.mark.parametrize(
    ("kinds", "outage"),
    [
        (["connection_error"] * 3, True),
        (["timeout", "connection_error", "server_error"], True),
        (["rate_limited", "server_error"], True),
        (["http_error"] * 3, False),  # 404: a wrong model or route, the same on every try
        (["connection_error", "bad_request"], False),
        (["invalid_response"], False),
    ],
)
def test_the_breaker_says_whether_its_streak_is_an_outage(kinds: list[str], outage: bool) -> None:
    breaker = FailureBreaker(limit=len(kinds))
    tripped = [breaker.observe(GenerationFailed(kind, "x")) for kind in kinds]
    assert tripped[-1] and breaker.outage is outage


@pytest.mark.parametrize("workers", [1, 2])
def test_a_server_that_cannot_be_reached_is_exit_1_not_bad_input(
    workers: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gymbench.cli import main

    monkeypatch.setattr(sharded, "OUTAGE_PATIENCE_S", 0.0)  # in this process: the driver gives up at once
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", 4), tmp_path / "out.jsonl"
    status = main(collect_args(tasks, out, f"+num_workers={workers}", "+save_results=false", "+shard_attempts=1",
                               f"+base_url=http://127.0.0.1:{_free_port()}/v1", "+model=m"))  # fmt: skip
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err and "cannot reach the model server" in err, err
