"""A strategy whose slot raises after N rollouts: the run stops dispatching, what is in flight lands,
the failure is one line (said once however often the strategy raises), and a resume with a working
strategy completes the run exactly: every pair once. Seeded over N, the parallelism and where the
slot breaks (``slot()`` itself or entering it)."""

from __future__ import annotations

import asyncio
import itertools
import random
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from gymbench import Component, hookimpl
from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.cli import main
from gymbench.rollout.engine import Collector
from gymbench.testing import FakeBackend

from .test_accounting import settings, written_pairs
from .test_dataset import write_tasks

pytestmark = pytest.mark.hostile  # a case of the adversarial sweep (issue 24): benches/hostile_count.sh


class _Breaking(AbstractAsyncContextManager[None]):
    async def __aenter__(self) -> None:
        raise RuntimeError("slot broke\nsecond line")

    async def __aexit__(self, *exc: Any) -> None:
        return None


class SlotRaises(SemaphoreStrategy):
    def __init__(self, limit: int, after: int, where: str) -> None:
        super().__init__(limit)
        self.after, self.where, self.calls = after, where, 0

    def slot(self) -> AbstractAsyncContextManager[None]:
        self.calls += 1
        if self.calls > self.after:
            if self.where == "call":
                raise RuntimeError("slot broke\nsecond line")
            return _Breaking()
        return super().slot()


class SlowBackend(FakeBackend):
    async def generate(self, request: Any) -> Any:
        await asyncio.sleep(0.001 * (request.task_index % 3))
        return await super().generate(request)


CASES = [(seed, *case) for seed, case in enumerate(itertools.product([0, 1, 3, 7], [1, 2, 4], ["call", "enter"]))]


@pytest.mark.parametrize(("seed", "after", "limit", "where"), CASES)
async def test_a_slot_that_raises_is_one_error_and_a_resume_completes_exactly(
    seed: int, after: int, limit: int, where: str, tmp_path: Path
) -> None:
    rows = random.Random(seed).randrange(12, 30)
    collector = Collector(
        settings(tmp_path, rows), SlowBackend(), ExactMatchVerifier(), SlotRaises(limit, after, where)
    )
    await collector.run()
    problems = collector.problems
    assert problems.errors == ["the strategy SlotRaises's slot() raised RuntimeError: slot broke second line"]
    assert problems.unwritten == [] and problems.cancelled_pairs == []  # in flight landed
    first = written_pairs(tmp_path / "out.jsonl")
    assert len(first) == after  # exactly the rollouts that got a slot
    resumed = Collector(
        settings(tmp_path, rows, resume=True), FakeBackend(), ExactMatchVerifier(), SemaphoreStrategy(2)
    )
    stats = await resumed.run()
    assert not resumed.problems.errors and stats.skipped == after
    assert written_pairs(tmp_path / "out.jsonl") == [(t, 0) for t in range(rows)]


@pytest.mark.parametrize("after", [0, 2, 5])
def test_the_command_says_it_in_one_line_and_exits_1(
    after: int, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Plugin:
        @hookimpl
        def gymbench_register_strategies(self) -> list[Component]:
            return [Component("breaks", lambda options: SlotRaises(2, after, "enter"))]

    from gymbench import plugins as plugins_module

    tasks, out = write_tasks(tmp_path / "t.jsonl", 9), tmp_path / "o.jsonl"
    real = plugins_module.get_plugin_manager

    def with_plugin(extra: Any = (), **kwargs: Any) -> Any:
        return real([*extra, Plugin()], **kwargs)

    monkeypatch.setattr(plugins_module, "get_plugin_manager", with_plugin)
    status = main(["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+strategy=breaks",
                   "+progress=false", "+save_results=false", "+sim.step_base_s=0.001"])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err, err
    assert err.count("slot() raised RuntimeError") == 1
    assert "+resume=true" in err and len(written_pairs(out)) == after


@pytest.mark.parametrize(("limit", "parallel"), [(3, 4), (5, 8), (2, 8), (2, 4)])
async def test_rollouts_cancelled_in_flight_are_counted_named_and_redone_by_a_resume(
    limit: int, parallel: int, tmp_path: Path
) -> None:
    from gymbench import GenerationFailed, GenerationRequest

    def down(request: GenerationRequest) -> BaseException | None:
        # the first rollouts fail at once; later ones are still in flight when the breaker trips
        return GenerationFailed("connection_error", "refused") if request.task_index < limit else None

    class Slow(FakeBackend):
        async def generate(self, request: GenerationRequest) -> Any:
            if request.task_index >= limit:
                await asyncio.sleep(5)  # cancelled long before this
            return await super().generate(request)

    collector = Collector(settings(tmp_path, 40, stop_after_failures=limit), Slow(fail_with=down),
                          ExactMatchVerifier(), SemaphoreStrategy(parallel))  # fmt: skip
    await collector.run()
    problems = collector.problems
    assert problems.stop_reason is not None and problems.outage
    assert problems.cancelled == len(problems.cancelled_pairs) >= 1
    assert all(task >= limit for task, _ in problems.cancelled_pairs)  # the slow ones, in flight
    written = written_pairs(tmp_path / "out.jsonl")
    assert not set(problems.cancelled_pairs) & set(written)
    resumed = Collector(settings(tmp_path, 40, resume=True), FakeBackend(), ExactMatchVerifier(), SemaphoreStrategy(2))
    await resumed.run()
    by_pair = sorted(written_pairs(tmp_path / "out.jsonl"))
    assert sorted(set(by_pair)) == [(t, 0) for t in range(40)]


@pytest.mark.parametrize("count", [0, 1, 3, 10, 11, 25])
def test_the_stop_line_names_the_cancelled_rollouts(count: int) -> None:
    from gymbench.collect.command import _cancelled

    pairs = [(task, 0) for task in reversed(range(count))]
    text = _cancelled(pairs)
    if not count:
        assert text == ""
        return
    assert f"{count} cancelled in flight, task/rollout: 0/0" in text
    assert text.count("/") == 1 + min(count, 10) and text.endswith(" ...)" if count > 10 else ")")


class _ExitRaises(AbstractAsyncContextManager[None]):
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: Any) -> None:
        raise RuntimeError("exit broke")


class ExitRaises(SemaphoreStrategy):
    """Every slot enters, and every slot's exit raises (issue 41: it ended in a traceback)."""

    def slot(self) -> AbstractAsyncContextManager[None]:
        return _ExitRaises()


@pytest.mark.parametrize("limit", [1, 4])
async def test_a_slot_whose_exit_raises_is_one_error_not_a_traceback(limit: int, tmp_path: Path) -> None:
    collector = Collector(settings(tmp_path, 12), SlowBackend(), ExactMatchVerifier(), ExitRaises(limit))
    await collector.run()
    assert collector.problems.errors == ["the strategy ExitRaises's slot raised RuntimeError: exit broke"]
    assert collector.problems.unwritten == []
    assert len(written_pairs(tmp_path / "out.jsonl")) >= 1  # what got a slot was written
