"""A data-parallel rank that fails or hangs is named, with its own error, in one line and within
seconds; the rank watch's logic on a fake clock; a GPU rank binds its device before nccl starts."""

from __future__ import annotations

import importlib.util
from datetime import timedelta
from typing import Any

import pytest
import torch

from gymbench import Component, Recorder, hookimpl
from gymbench.errors import GymbenchError
from gymbench.settings import build_settings
from gymbench.testing import make_plugins
from gymbench.train import data_parallel, ddp
from gymbench.train.execute import train
from gymbench.train.gpu_monitor import GpuMonitor
from gymbench.train.rank_watch import STARTUP_S, Progress, RankWatch, failure_of
from gymbench.train.settings import TrainSettings
from tests.train.models_for_tests import build_hanging_on_rank_1, build_raising_on_rank_1

SMALL = ["batch=8", "steps=3", "warmup=1", "threads=1", "progress=false", "memory=false", "flops=false", "dp=2"]


class FaultyModels:
    @hookimpl
    def gymbench_register_models(self) -> list[Component]:
        return [
            Component("raises-on-rank-1", build_raising_on_rank_1, "raises on rank 1"),
            Component("hangs-on-rank-1", build_hanging_on_rank_1, "hangs on rank 1"),
        ]


def run_failing(model: str, *extra: str) -> str:
    settings = build_settings(TrainSettings, [*SMALL, f"model={model}", *extra])
    with pytest.raises(GymbenchError) as caught:
        train(settings, make_plugins(FaultyModels()), Recorder())
    return str(caught.value)


def test_under_torchrun_the_failing_rank_is_named_with_its_own_error() -> None:
    message = run_failing("raises-on-rank-1")
    assert message.startswith("torchrun with 2 ranks: rank 1 failed: RuntimeError: rank 1's own failure")
    assert "models_for_tests.py" in message and "\n" not in message
    assert "Connection closed" not in message


@pytest.mark.slow
def test_under_torchrun_a_hung_rank_is_named_after_the_hang_timeout() -> None:
    message = run_failing("hangs-on-rank-1", "rank_hang_s=10")
    assert message.startswith("torchrun with 2 ranks: rank 1 hung: no rank progressed for")
    assert "stopped at step 3 forward" in message and "rank 0 at step 3 backward" in message


ray_installed = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")


@pytest.mark.ray
@ray_installed
@pytest.mark.parametrize(("model", "said"), [("raises-on-rank-1", "rank 1 failed: RuntimeError: rank 1's own failure"),
                                             ("hangs-on-rank-1", "rank 1 hung: no rank progressed for")])  # fmt: skip
def test_under_ray_the_failing_or_hung_rank_is_one_line(model: str, said: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    message = run_failing(model, "launcher=ray", "rank_hang_s=10")
    assert message.startswith(f"Ray with 2 ranks: {said}") and "\n" not in message


def snapshot(rank: int, count: int, where: str, waiting: bool = False, failure: Any = None) -> dict[str, Any]:
    return {"beat": {"rank": rank, "count": count, "where": where, "waiting": waiting, "pid": 100 + rank},
            "failure": failure}  # fmt: skip


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_hung_rank_is_the_one_behind_among_those_not_waiting() -> None:
    clock = FakeClock()
    watch = RankWatch(3, hang_s=5, clock=clock)
    watch.observe([snapshot(0, 9, "step 2 backward"), snapshot(1, 8, "step 2 forward"),
                   snapshot(2, 4, "waiting at the barrier", waiting=True)])  # fmt: skip
    clock.now = 4.9
    watch.observe([snapshot(0, 9, "step 2 backward")])
    assert watch.hung() is None  # not yet the timeout
    clock.now = 5.0
    message = watch.hung()
    assert message is not None and message.startswith("rank 1 hung: no rank progressed for 5 s")
    assert "pid 101" in message and "stopped at step 2 forward" in message


def test_progress_on_any_rank_restarts_the_hang_clock() -> None:
    clock = FakeClock()
    watch = RankWatch(2, hang_s=5, clock=clock)
    for second in range(20):
        clock.now = float(second)
        watch.observe([snapshot(0, second, "busy"), snapshot(1, 3, "waiting", waiting=True)])
        assert watch.hung() is None


def test_a_rank_that_never_beat_is_named_after_the_start_up_allowance() -> None:
    clock = FakeClock()
    watch = RankWatch(2, hang_s=5, clock=clock)
    watch.observe([snapshot(0, 1, "waiting at the process group's start", waiting=True)])
    clock.now = STARTUP_S - 1
    assert watch.hung() is None  # importing torch under load is slow, not hung
    clock.now = STARTUP_S
    assert (watch.hung() or "").startswith(f"rank 1 hung: no heartbeat from it in {STARTUP_S:.0f} s")


def test_start_up_phases_get_the_start_up_allowance_until_a_rank_steps() -> None:
    """At load 6 on 2 cores both ranks sat 13 s at 'building the model', waiting for a CPU: with
    +rank_hang_s=10 that read as hung. Start-up phases get STARTUP_S; once a rank steps, the timeout."""
    clock = FakeClock()
    watch = RankWatch(2, hang_s=10, clock=clock)
    watch.observe([snapshot(0, 1, "building the model"), snapshot(1, 1, "building the model")])
    clock.now = STARTUP_S - 1
    assert watch.hung() is None
    clock.now = STARTUP_S
    assert (watch.hung() or "").startswith(f"rank 0 hung: no rank progressed for {STARTUP_S:.0f} s")
    watch.observe([snapshot(0, 5, "step 1 backward"), snapshot(1, 4, "step 1 forward")])
    clock.now += 9
    assert watch.hung() is None
    clock.now += 1  # in a step, the hang timeout applies
    assert (watch.hung() or "").startswith("rank 1 hung: no rank progressed for 10 s")


def test_the_first_recorded_error_is_the_cause() -> None:
    def failed(rank: int, message: str) -> dict[str, Any]:
        try:
            raise RuntimeError(message)
        except RuntimeError as exc:
            return failure_of(rank, exc).__dict__

    first = failed(1, "the real error")
    later = failed(0, "Connection closed by peer")
    watch = RankWatch(2, hang_s=5)
    watch.observe([snapshot(0, 5, "x", failure=later), snapshot(1, 5, "y", failure=first)])
    cause = watch.first_failure()
    assert cause is not None and cause.line().startswith("rank 1 failed: RuntimeError: the real error (at ")


def test_a_gpu_rank_binds_its_device_before_nccl_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through fakes of torch.cuda and torch.distributed: the order of the calls, on a CPU."""
    calls: list[str] = []

    class Stop(Exception):
        pass

    def init_process_group(backend: str, timeout: timedelta) -> None:
        calls.append(f"init {backend}")
        raise Stop

    monkeypatch.setattr(torch.cuda, "set_device", lambda index: calls.append(f"set_device {index}"))
    monkeypatch.setattr(ddp.dist, "init_process_group", init_process_group)
    environment = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    settings = build_settings(TrainSettings, ["model=mlp", "size=tiny", "device=cpu"])
    from gymbench.train.execute import build_config

    job = {"config": build_config(settings).to_dict(), "backend": "nccl", "steps": 1, "warmup": 0}
    with pytest.raises(Stop):
        ddp.run_rank(job, progress=Progress(3, 0))
    assert calls == ["set_device 1", "init nccl"]


def test_a_gpu_rank_samples_its_own_gpu_and_a_cpu_rank_says_it_has_none() -> None:
    class Session:
        device = torch.device("cuda", 1)

    monitor = ddp._gpu_monitor(Session())  # type: ignore[arg-type]
    assert isinstance(monitor, GpuMonitor) and monitor.index == 1
    Session.device = torch.device("cpu")
    with ddp._gpu_monitor(Session()) as nothing:  # type: ignore[arg-type]
        assert nothing is None
    assert ddp.NO_GPU["available"] is False and "no GPU" in str(ddp.NO_GPU["reason"])


def test_a_ray_actor_asked_before_its_run_began_is_counted_under_its_rank() -> None:
    """An actor's heartbeat can arrive before its run set its rank: the driver's index names it."""

    class Method:
        def __init__(self, answer: dict[str, Any]) -> None:
            self.answer = answer

        def remote(self) -> dict[str, Any]:
            return self.answer

    class Actor:
        def __init__(self) -> None:
            self.heartbeat = Method(snapshot(-1, 0, "starting"))

    class FakeRay:
        def get(self, call: dict[str, Any], timeout: float) -> dict[str, Any]:
            return call

    beats = data_parallel._ray_heartbeats(FakeRay(), [Actor(), Actor()])
    assert [beat["beat"]["rank"] for beat in beats] == [0, 1]


def test_a_rank_that_computes_in_a_long_phase_is_not_hung() -> None:
    """The counter stands still through a long forward, but the rank's thread uses CPU: not hung.
    A rank asleep or blocked uses none, and is named once the timeout passes."""
    clock = FakeClock()
    watch = RankWatch(2, hang_s=5, clock=clock)
    for second in range(20):
        clock.now = float(second)
        busy = {**snapshot(0, 7, "step 1 forward"), "beat": {**snapshot(0, 7, "step 1 forward")["beat"],
                                                             "cpu_s": 0.8 * second}}  # fmt: skip
        watch.observe([busy, snapshot(1, 7, "step 1 forward")])
        assert watch.hung() is None
    watch.observe([{**busy}, snapshot(1, 7, "step 1 forward")])  # rank 0's CPU time stops growing
    clock.now = 25.0
    assert watch.hung() is not None


def test_the_heartbeat_counts_the_cpu_time_of_the_working_thread() -> None:
    progress = Progress(0, 1)
    before = progress.snapshot()["beat"]["cpu_s"]
    sum(i * i for i in range(300_000))
    assert progress.snapshot()["beat"]["cpu_s"] > before
