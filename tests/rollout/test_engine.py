"""The collection loop with the test kit's FakeBackend (no server needed)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gymbench import GenerationFailed, GenerationRequest
from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.rollout.dataset import DatasetError, TaskSlice
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.rollout.verification import VerifySettings
from gymbench.testing import FakeBackend

from .test_dataset import write_tasks


def settings(tmp_path: Path, rows: int = 20, **kwargs: object) -> CollectSettings:
    source = tmp_path / "tasks.jsonl"
    if not source.exists():
        write_tasks(source, rows)
    return CollectSettings(source, tmp_path / "out.jsonl", verify=VerifySettings(name="exact-match"), **kwargs)  # type: ignore[arg-type]


def answer_index(request: GenerationRequest) -> str:
    return str(request.params["input"])[1:]  # "q7" -> "7": the expected answer


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_rows_rewards_and_bounded_concurrency(tmp_path: Path) -> None:
    backend = FakeBackend(respond=answer_index, latency_s=0.01)
    peak_tasks = 0

    def on_progress(done: int, stats: object) -> None:
        nonlocal peak_tasks
        peak_tasks = max(peak_tasks, len(asyncio.all_tasks()))

    collector = Collector(settings(tmp_path, 50), backend, ExactMatchVerifier(), SemaphoreStrategy(4), on_progress)
    stats = await collector.run()
    assert stats.completed == 50 and stats.failed == 0 and stats.mean_reward == 1.0
    assert backend.peak_in_flight == 4
    assert peak_tasks <= 4 + 2  # the rollouts in flight, the test's own task, and slack of one
    rows = read_rows(tmp_path / "out.jsonl")
    assert sorted(r["task_index"] for r in rows) == list(range(50))
    first = rows[0]
    assert first["status"] == "ok" and first["reward"] == 1.0 and first["expected_answer"] == str(first["task_index"])
    assert set(first["timings"]) >= {"slot_wait", "verification", "total"}
    assert first["verifier"]["name"] == "exact-match" and first["failure"] is None


async def test_overrides_are_merged_into_each_request(tmp_path: Path) -> None:
    backend = FakeBackend()
    cfg = settings(tmp_path, 3, overrides={"temperature": 0.5, "max_output_tokens": 7})
    await Collector(cfg, backend, ExactMatchVerifier(), SemaphoreStrategy(2)).run()
    assert all(call.params["temperature"] == 0.5 and call.params["max_output_tokens"] == 7 for call in backend.calls)
    assert read_rows(tmp_path / "out.jsonl")[0]["responses_create_params"]["temperature"] == 0.5


async def test_failures_are_rows_with_kind_and_reason(tmp_path: Path) -> None:
    def fail_odd(request: GenerationRequest) -> BaseException | None:
        if request.task_index % 2:
            return GenerationFailed("server_error", "HTTP 500: boom", 500, retries=2)
        return None

    backend = FakeBackend(respond=answer_index, fail_with=fail_odd)
    stats = await Collector(settings(tmp_path, 6), backend, ExactMatchVerifier(), SemaphoreStrategy(3)).run()
    assert stats.completed == 3 and stats.failed == 3 and stats.retries == 6
    failed = [r for r in read_rows(tmp_path / "out.jsonl") if r["status"] == "failed"]
    assert {r["failure"]["kind"] for r in failed} == {"server_error"}
    assert failed[0]["failure"]["status"] == 500 and failed[0]["reward"] is None


async def test_a_crashing_backend_or_verifier_is_recorded_not_fatal(tmp_path: Path) -> None:
    class BrokenVerifier:
        def verify(self, row: object, text: str) -> object:
            raise ZeroDivisionError("oops")

    backend = FakeBackend(fail_with=lambda r: KeyError("bug") if r.task_index == 0 else None)
    stats = await Collector(settings(tmp_path, 3), backend, BrokenVerifier(), SemaphoreStrategy(1)).run()
    rows = {r["task_index"]: r for r in read_rows(tmp_path / "out.jsonl")}
    assert rows[0]["failure"]["kind"] == "backend_error"
    assert rows[1]["status"] == "ok" and rows[1]["verifier"]["failure_kind"] == "verifier_error"
    assert stats.verify_failures == 2


async def test_resume_skips_done_and_retries_failed_up_to_the_cap(tmp_path: Path) -> None:
    failing = {3}
    backend = FakeBackend(
        respond=answer_index,
        fail_with=lambda r: GenerationFailed("timeout", "slow") if r.task_index in failing else None,
    )
    cfg = settings(tmp_path, 5, max_attempts=2)
    await Collector(cfg, backend, ExactMatchVerifier(), SemaphoreStrategy(2)).run()
    resumed = CollectSettings(cfg.input_path, cfg.output_path, max_attempts=2, resume=True)
    backend.calls.clear()
    stats = await Collector(resumed, backend, ExactMatchVerifier(), SemaphoreStrategy(2)).run()
    assert [c.task_index for c in backend.calls] == [3] and stats.skipped == 4
    rows = read_rows(cfg.output_path)
    assert len(rows) == 5 and [r["attempt"] for r in rows if r["task_index"] == 3] == [2]
    backend.calls.clear()
    await Collector(resumed, backend, ExactMatchVerifier(), SemaphoreStrategy(2)).run()
    assert backend.calls == []  # attempt 2 of 2 used: the failure stands
    assert len(read_rows(cfg.output_path)) == 5


async def test_existing_output_without_resume_is_refused_before_any_request(tmp_path: Path) -> None:
    cfg = settings(tmp_path, 2)
    cfg.output_path.write_text('{"task_index": 0, "rollout_index": 0, "status": "ok"}\n')
    backend = FakeBackend()
    with pytest.raises(Exception, match="already exists"):
        await Collector(cfg, backend, ExactMatchVerifier(), SemaphoreStrategy(1)).run()
    assert backend.calls == [] and not backend.opened


async def test_bad_row_mid_file_stops_after_in_flight_rollouts_land(tmp_path: Path) -> None:
    source = write_tasks(tmp_path / "tasks.jsonl", 4)
    with open(source, "a") as handle:
        handle.write("not json\n")
    cfg = CollectSettings(source, tmp_path / "out.jsonl", selection=TaskSlice())
    with pytest.raises(DatasetError, match=r"tasks.jsonl:5: malformed JSON"):
        await Collector(cfg, FakeBackend(latency_s=0.02), ExactMatchVerifier(), SemaphoreStrategy(8)).run()
    assert len(read_rows(cfg.output_path)) == 4


async def test_with_the_failures_sidecar_failed_rows_leave_the_output_and_count_toward_the_cap(tmp_path: Path) -> None:
    """NeMo Gym 0.7.0's layout: failed attempts go to ``out_failures.jsonl``; a resume runs every pair
    the output lacks again, while its attempts there stay under ``max_attempts``."""
    failing = {1, 3}
    backend = FakeBackend(
        respond=answer_index,
        fail_with=lambda r: GenerationFailed("timeout", "slow") if r.task_index in failing else None,
    )
    cfg = settings(tmp_path, 5, max_attempts=2, failures_apart=True)
    sidecar = tmp_path / "out_failures.jsonl"
    await Collector(cfg, backend, ExactMatchVerifier(), SemaphoreStrategy(2)).run()
    assert sorted(r["task_index"] for r in read_rows(cfg.output_path)) == [0, 2, 4]
    assert {(r["task_index"], r["_ng_failure_class"], r["_ng_failure_message"]) for r in read_rows(sidecar)} == {
        (1, "timeout", "slow"),
        (3, "timeout", "slow"),
    }
    with sidecar.open("ab") as handle:
        handle.write(b'{"task_index": 1, "rollout_in')  # a kill landed mid-write: dropped, the next row starts whole
    resumed = CollectSettings(cfg.input_path, cfg.output_path, max_attempts=2, resume=True, failures_apart=True)
    failing.discard(3)
    backend.calls.clear()
    stats = await Collector(resumed, backend, ExactMatchVerifier(), SemaphoreStrategy(2)).run()
    assert sorted(c.task_index for c in backend.calls) == [1, 3] and stats.skipped == 3
    assert sorted((r["task_index"], r["attempt"]) for r in read_rows(sidecar)) == [(1, 1), (1, 2), (3, 1)]
    assert sorted(r["task_index"] for r in read_rows(cfg.output_path)) == [0, 2, 3, 4]
    backend.calls.clear()
    await Collector(resumed, backend, ExactMatchVerifier(), SemaphoreStrategy(2)).run()
    assert backend.calls == []  # pair 1 used its 2 attempts: the failure stands, in the sidecar
