"""Every rollout ends as a row or as a reported error: plugins that raise, a broken writer, a dead server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from gymbench import GenerationFailed, GenerationRequest, RequestOutcome
from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.rollout.output import load_resume_state
from gymbench.rollout.verification import VerifySettings
from gymbench.testing import FakeBackend

from .test_dataset import write_tasks


def settings(tmp_path: Path, rows: int = 10, **kwargs: Any) -> CollectSettings:
    source = tmp_path / "tasks.jsonl"
    write_tasks(source, rows)
    return CollectSettings(source, tmp_path / "out.jsonl", verify=VerifySettings(name="exact-match"), **kwargs)


def written_pairs(path: Path) -> list[tuple[int, int]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return sorted((row["task_index"], row["rollout_index"]) for row in rows)


class ObserveRaises(SemaphoreStrategy):
    """A strategy whose feedback handler breaks on the 5th rollout."""

    def __init__(self) -> None:
        super().__init__(2)
        self.seen = 0

    def observe(self, outcome: RequestOutcome) -> None:
        self.seen += 1
        if self.seen == 5:
            raise ValueError("observe broke")


async def test_a_strategy_that_raises_is_reported_and_its_rollout_still_has_no_silent_gap(tmp_path: Path) -> None:
    collector = Collector(settings(tmp_path), FakeBackend(), ExactMatchVerifier(), ObserveRaises())
    stats = await collector.run()
    problems = collector.problems
    assert problems.errors and "observe() raised ValueError: observe broke" in problems.errors[0]
    written = written_pairs(tmp_path / "out.jsonl")
    # every task dispatched is either written or listed as unwritten; nothing vanishes
    dispatched = stats.completed + stats.failed + len(problems.unwritten)
    assert dispatched == len(written) + len(problems.unwritten)
    assert len(problems.unwritten) == 1 and problems.unwritten[0] not in written
    assert len(written) < 10  # the run stopped dispatching after the error


async def test_a_progress_callback_that_raises_stops_the_run_but_keeps_the_row(tmp_path: Path) -> None:
    def on_progress(done: int, stats: Any) -> None:
        if stats.completed == 3:
            raise RuntimeError("progress bar broke")

    collector = Collector(settings(tmp_path), FakeBackend(), ExactMatchVerifier(), SemaphoreStrategy(1), on_progress)
    await collector.run()
    assert collector.problems.errors == ["a progress callback raised RuntimeError: progress bar broke"]
    assert collector.problems.unwritten == []  # its row was written before the callback ran
    assert written_pairs(tmp_path / "out.jsonl") == [(0, 0), (1, 0), (2, 0)]


async def test_a_writer_that_raises_lists_the_rollout_without_a_row(tmp_path: Path) -> None:
    collector = Collector(settings(tmp_path), FakeBackend(), ExactMatchVerifier(), SemaphoreStrategy(1))
    real_write = None

    def failing_write(row: dict[str, Any]) -> None:
        if row["task_index"] == 2:
            raise OSError(28, "No space left on device")
        assert real_write is not None
        real_write(row)

    original_run = collector.run

    async def run_with_broken_writer() -> Any:
        nonlocal real_write
        import gymbench.rollout.engine as engine

        original = engine.RolloutWriter

        class Broken(original):  # type: ignore[misc, valid-type]
            def __init__(self, path: Path, append: bool) -> None:
                nonlocal real_write
                super().__init__(path, append)
                real_write = super().write
                self.write = failing_write  # type: ignore[method-assign]

        engine.RolloutWriter = Broken  # type: ignore[misc]
        try:
            return await original_run()
        finally:
            engine.RolloutWriter = original  # type: ignore[misc]

    await run_with_broken_writer()
    assert collector.problems.unwritten == [(2, 0)]
    assert "the rollout writer raised OSError" in collector.problems.errors[0]
    assert written_pairs(tmp_path / "out.jsonl") == [(0, 0), (1, 0)]
    assert 2 not in {key >> 24 for key in load_resume_state(tmp_path / "out.jsonl", 3).done}


async def test_a_dead_server_trips_the_breaker_and_in_flight_rollouts_are_not_written(tmp_path: Path) -> None:
    def refuse(request: GenerationRequest) -> BaseException:
        return GenerationFailed("connection_error", "Cannot connect to host 127.0.0.1:1")

    backend = FakeBackend(fail_with=refuse, latency_s=0.001)
    collector = Collector(settings(tmp_path, 200, stop_after_failures=5), backend, ExactMatchVerifier(),
                          SemaphoreStrategy(4))  # fmt: skip
    stats = await collector.run()
    reason = collector.problems.stop_reason
    assert reason is not None and "5 rollouts in a row failed (connection_error: 5)" in reason
    assert stats.failed == 5 and len(backend.calls) < 20  # not 200 rollouts' worth of retries
    assert len(written_pairs(tmp_path / "out.jsonl")) == 5
    assert collector.problems.cancelled <= 4


async def test_one_success_resets_the_failure_streak(tmp_path: Path) -> None:
    def every_third_succeeds(request: GenerationRequest) -> BaseException | None:
        return None if request.task_index % 3 == 0 else GenerationFailed("server_error", "HTTP 500")

    collector = Collector(settings(tmp_path, 30, stop_after_failures=3), FakeBackend(fail_with=every_third_succeeds),
                          ExactMatchVerifier(), SemaphoreStrategy(1))  # fmt: skip
    stats = await collector.run()
    assert collector.problems.stop_reason is None
    assert stats.completed == 10 and stats.failed == 20


@pytest.mark.parametrize("limit", [0])
async def test_the_breaker_can_be_turned_off(tmp_path: Path, limit: int) -> None:
    def refuse(request: GenerationRequest) -> BaseException:
        return GenerationFailed("timeout", "no answer")

    collector = Collector(settings(tmp_path, 30, stop_after_failures=limit), FakeBackend(fail_with=refuse),
                          ExactMatchVerifier(), SemaphoreStrategy(2))  # fmt: skip
    stats = await collector.run()
    assert stats.failed == 30 and collector.problems.stop_reason is None


class ClosesLikeAiohttp(FakeBackend):
    """A backend whose close takes a few loop turns (as an aiohttp session's does) and which refuses
    requests once closed: a rollout still running then would land as a false ``failed`` row."""

    def __init__(self) -> None:
        super().__init__(latency_s=0.05)  # long enough that rollouts are in flight when the run is cut
        self.in_flight_at_close: int | None = None

    async def __aexit__(self, *exc: object) -> None:
        self.in_flight_at_close = self.in_flight
        self.closed = True
        for _ in range(5):
            await asyncio.sleep(0)

    async def generate(self, request: GenerationRequest) -> Any:
        if self.closed:
            raise RuntimeError("Session is closed")
        return await super().generate(request)


async def test_an_interrupted_run_cancels_in_flight_rollouts_before_the_backend_closes(tmp_path: Path) -> None:
    backend = ClosesLikeAiohttp()
    collector = Collector(settings(tmp_path, 400), backend, ExactMatchVerifier(), SemaphoreStrategy(4))
    run = asyncio.ensure_future(collector.run())
    out = tmp_path / "out.jsonl"
    while not written_pairs(out):
        await asyncio.sleep(0.001)
    run.cancel()  # what Ctrl-C does to the collection's task
    with pytest.raises(asyncio.CancelledError):
        await run
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert backend.in_flight_at_close == 0
    assert rows and all(row["status"] == "ok" for row in rows)
    assert collector.problems.cancelled <= 4  # cancelled, not written: a resume redoes them
    assert not set(collector.problems.cancelled_pairs) & set(written_pairs(out))
