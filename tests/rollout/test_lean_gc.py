"""A run holds the garbage collector lean (rollout/lean_gc.py) and gives it back as it found it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymbench import GenerationRequest
from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.rollout.dataset import DatasetError
from gymbench.rollout.engine import Collector
from gymbench.rollout.lean_gc import YOUNG_THRESHOLD, hold_gc
from gymbench.testing import FakeBackend

from .test_engine import answer_index, read_rows, settings


@pytest.fixture(autouse=True)
def collector_as_found() -> Iterator[None]:
    enabled, thresholds = gc.isenabled(), gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    gc.enable() if enabled else gc.disable()


async def test_a_run_freezes_and_raises_the_young_threshold_then_restores_both(tmp_path: Path) -> None:
    gc.set_threshold(700, 10, 10)
    frozen_before = gc.get_freeze_count()
    seen: list[tuple[int, int]] = []

    def respond(request: GenerationRequest) -> str:
        seen.append((gc.get_threshold()[0], gc.get_freeze_count()))
        return answer_index(request)

    stats = await Collector(settings(tmp_path), FakeBackend(respond), ExactMatchVerifier(), SemaphoreStrategy(4)).run()
    assert stats.completed == 20 and len(read_rows(tmp_path / "out.jsonl")) == 20
    assert {young for young, _ in seen} == {YOUNG_THRESHOLD}
    assert all(frozen > frozen_before for _, frozen in seen)
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == frozen_before


async def test_a_run_that_fails_gives_the_collector_back_too(tmp_path: Path) -> None:
    gc.set_threshold(700, 10, 10)
    frozen_before = gc.get_freeze_count()
    cfg = settings(tmp_path)
    with open(cfg.input_path, "a") as tasks:
        tasks.write("not json\n")  # a bad row after the good ones: the run raises once they landed
    with pytest.raises(DatasetError):
        await Collector(cfg, FakeBackend(answer_index), ExactMatchVerifier(), SemaphoreStrategy(4)).run()
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == frozen_before


def test_overlapping_holds_end_with_the_last_and_a_higher_threshold_is_kept() -> None:
    gc.set_threshold(50_000, 10, 10)
    first, second = hold_gc(), hold_gc()
    assert gc.get_threshold()[0] == 50_000
    first.release()
    first.release()  # once only
    assert gc.get_freeze_count() > 0
    second.release()
    assert gc.get_threshold() == (50_000, 10, 10)
    assert gc.get_freeze_count() == 0


def test_a_disabled_collector_is_left_alone() -> None:
    gc.disable()
    gc.set_threshold(700, 10, 10)
    hold = hold_gc()
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0
    hold.release()
    assert not gc.isenabled()
