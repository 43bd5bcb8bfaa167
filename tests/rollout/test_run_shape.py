"""Stop conditions that end a run cleanly, and warm-up and cool-down left out of the statistics.

Simulated time throughout: the in-process simulator on a virtual clock, so dispatch times and
counts are exact.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.collect.collection import make_strategy
from gymbench.collect.summary import format_summary
from gymbench.errors import GymbenchError
from gymbench.plugins import Plugins, get_plugin_manager
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.rollout.latency import Slo
from gymbench.rollout.stats import CollectStats
from gymbench.sim import InProcessBackend, SimConfig, run_in_simulated_time
from gymbench.testing import FakeBackend
from gymbench.types import Backend, ConcurrencyStrategy, GenerationFailed, GenerationRequest

ENGINE = SimConfig(step_base_s=0.01, step_per_seq_s=0.0, prefill_per_token_s=0.0, output_tokens_mean=4,
                   max_num_seqs=8)  # fmt: skip


def write_tasks(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"responses_create_params": {"input": f"{i}?"}}) + "\n" for i in range(count)))
    return path


def run(tmp_path: Path, tasks: int, strategy: ConcurrencyStrategy, backend: Backend | None = None,
        slo: Slo | None = None, **policy: object) -> tuple[CollectStats, list[dict[str, object]]]:  # fmt: skip
    out = tmp_path / "out.jsonl"

    async def main() -> CollectStats:
        settings = CollectSettings(write_tasks(tmp_path / "t.jsonl", tasks), out, overwrite=True, **policy)
        clock = asyncio.get_running_loop().time
        async with InProcessBackend(ENGINE) as sim:
            collector = Collector(settings, backend or sim, ExactMatchVerifier(), strategy, clock=clock)
            collector.slo = slo or Slo()
            return await collector.run()

    stats = run_in_simulated_time(main())
    return stats, [json.loads(line) for line in out.read_text().splitlines()]


def every_third_fails(request: GenerationRequest) -> BaseException | None:
    return GenerationFailed("server_error", "HTTP 500: boom", 500) if request.task_index % 3 == 0 else None


def test_max_errors_ends_the_run_cleanly_and_says_why(tmp_path: Path) -> None:
    backend = FakeBackend(latency_s=0.01, fail_with=every_third_fails)
    stats, rows = run(tmp_path, 300, SemaphoreStrategy(1), backend, stop_after_errors=5)
    summary = stats.summary()
    assert summary["stopped"] == "5 rollouts failed, reaching stop_after_errors=5"
    assert stats.failed == 5 and len(rows) == stats.completed + stats.failed < 300
    assert "stopped early (cleanly, in-flight rollouts written): 5 rollouts failed" in format_summary(
        summary, tmp_path / "out.jsonl"
    )


def test_the_error_rate_is_judged_only_after_enough_rollouts(tmp_path: Path) -> None:
    backend = FakeBackend(latency_s=0.01, fail_with=every_third_fails)
    stats, rows = run(tmp_path, 300, SemaphoreStrategy(1), backend, stop_at_error_rate=0.3, error_rate_min_rollouts=30)
    assert stats.summary()["stopped"] == "10 of 30 rollouts failed (33.3%), reaching stop_at_error_rate=0.3"
    assert len(rows) == 30
    calm, rows = run(tmp_path, 60, SemaphoreStrategy(1), backend, stop_at_error_rate=0.5)
    assert "stopped" not in calm.summary() and len(rows) == 60


def test_warmup_and_cooldown_by_count_are_written_flagged_and_left_out(tmp_path: Path) -> None:
    stats, rows = run(tmp_path, 20, SemaphoreStrategy(2), slo=Slo(e2e_s=60.0), warmup_rollouts=3, cooldown_rollouts=2)

    phases = {row["task_index"]: row.get("phase") for row in rows}
    assert len(rows) == 20 and stats.completed == 20
    assert [i for i, p in sorted(phases.items()) if p == "warmup"] == [0, 1, 2]
    assert [i for i, p in sorted(phases.items()) if p == "cooldown"] == [18, 19]
    summary = stats.summary()
    assert summary["excluded"] == {"warmup": 3, "cooldown": 2}
    assert summary["latency_percentiles_s"]["e2e"]["count"] == 15
    assert summary["goodput"]["attempted"] == summary["goodput"]["within_slo"] == 15  # only the measured are judged


def test_warmup_and_cooldown_by_time_follow_the_dispatch_clock(tmp_path: Path) -> None:
    constant = make_strategy(Plugins(get_plugin_manager()), "constant", {"request_rate": 10.0}, None)
    stats, rows = run(tmp_path, 20, constant, warmup_s=0.25, cooldown_s=0.25)
    flagged = {p: sorted(r["task_index"] for r in rows if r.get("phase") == p) for p in ("warmup", "cooldown")}
    assert flagged == {"warmup": [0, 1], "cooldown": [17, 18, 19]}  # sent at 0.1, 0.2 ... 2.0 s
    assert len(rows) == 20 and stats.summary()["latency_percentiles_s"]["e2e"]["count"] == 15


def test_cooldown_by_count_needs_an_input_that_can_be_counted(tmp_path: Path) -> None:
    from gymbench.rollout.phases import Phases

    with pytest.raises(GymbenchError, match="cooldown_rollouts counts back from the last rollout"):
        Phases(lambda: 0.0, cooldown_rollouts=2, planned=None)
    with pytest.raises(GymbenchError, match="setting 'stop_at_error_rate'"):
        CollectSettings(tmp_path / "t", tmp_path / "o", stop_at_error_rate=1.5)


# --- a run stopped half-way and resumed flags the rows an uninterrupted run flags ---------------


def collect_once(tmp_path: Path, strategy: ConcurrencyStrategy, *, resume: bool = False, cancel_after: int = 0,
                 backend: Backend | None = None, **policy: object) -> list[int]:  # fmt: skip
    """One run into ``tmp_path/out.jsonl`` over 20 tasks; ``cancel_after``: cancel it (as Ctrl-C does)
    once that many rollouts landed. Returns the task indices this run dispatched, in order."""
    dispatched: list[int] = []

    async def main() -> None:
        settings = CollectSettings(write_tasks(tmp_path / "t.jsonl", 20), tmp_path / "out.jsonl",
                                   overwrite=not resume, resume=resume, **policy)  # fmt: skip
        async with InProcessBackend(ENGINE) as sim:
            inner = backend or sim
            original = inner.generate

            async def generate(request: GenerationRequest) -> object:
                dispatched.append(request.task_index)
                return await original(request)

            inner.generate = generate  # type: ignore[method-assign]
            landed = 0

            def progress(done: int, stats: CollectStats) -> None:
                nonlocal landed
                landed += done
                if cancel_after and landed == cancel_after:
                    job.cancel()

            collector = Collector(settings, inner, ExactMatchVerifier(), strategy, progress,
                                  clock=asyncio.get_running_loop().time)  # fmt: skip
            job = asyncio.ensure_future(collector.run())
            try:
                await job
            except asyncio.CancelledError:
                pass

    run_in_simulated_time(main())
    return dispatched


def flags(tmp_path: Path) -> dict[tuple[int, int], str | None]:
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    pairs = [(row["task_index"], row["rollout_index"]) for row in rows]
    assert sorted(pairs) == [(i, 0) for i in range(20)]  # each rollout once: none lost, none twice
    return {(row["task_index"], row["rollout_index"]): row.get("phase") for row in rows}


def fails_task_9_once(request: GenerationRequest) -> BaseException | None:
    return GenerationFailed("server_error", "HTTP 500: boom", 500) if request.task_index == 9 else None


def constant_rate() -> ConcurrencyStrategy:
    return make_strategy(Plugins(get_plugin_manager()), "constant", {"request_rate": 10.0}, None)


@pytest.mark.parametrize("stop", ["cancelled", "stop_after_errors"])
@pytest.mark.parametrize(
    ("strategy", "cooldown"),
    [(lambda: SemaphoreStrategy(2), {"cooldown_rollouts": 3}), (constant_rate, {"cooldown_s": 0.25})],
    ids=["by-count", "by-time"],
)
def test_a_resumed_run_flags_the_cooldown_rows_an_uninterrupted_run_flags(
    tmp_path: Path, stop: str, strategy: Callable[[], ConcurrencyStrategy], cooldown: dict[str, object]
) -> None:
    """The cool-down is the selection's end: a run stopped half-way (cancelled, or by a stop
    condition) and resumed flags, pair by pair, what one uninterrupted run flags."""
    make = strategy
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    whole.mkdir(), parts.mkdir()
    collect_once(whole, make(), **cooldown)
    if stop == "cancelled":
        collect_once(parts, make(), cancel_after=8, **cooldown)
    else:  # a stop condition ends it cleanly at task 9's failure; the resume retries task 9
        failing = FakeBackend(latency_s=0.05, fail_with=fails_task_9_once)
        collect_once(parts, make(), backend=failing, stop_after_errors=1, max_attempts=2, **cooldown)
    assert 0 < len((parts / "out.jsonl").read_text().splitlines()) < 20  # stopped half-way
    collect_once(parts, make(), resume=True, max_attempts=2, **cooldown)

    expected = flags(whole)
    assert [pair for pair, phase in sorted(expected.items()) if phase] == [(17, 0), (18, 0), (19, 0)]
    assert flags(parts) == expected


def test_warmup_belongs_to_each_run_a_resumed_one_included(tmp_path: Path) -> None:
    """Each start meets cold connections and an empty batch: the resumed run's first rollouts are
    warm-up too, beside those the first run flagged; the cool-down is still the selection's end."""
    collect_once(tmp_path, SemaphoreStrategy(2), cancel_after=8, warmup_rollouts=3, cooldown_rollouts=2)
    resumed = collect_once(tmp_path, SemaphoreStrategy(2), resume=True, warmup_rollouts=3, cooldown_rollouts=2)
    phases = flags(tmp_path)
    assert sorted(i for (i, _), p in phases.items() if p == "warmup") == sorted({0, 1, 2, *resumed[:3]})
    assert sorted(i for (i, _), p in phases.items() if p == "cooldown") == [18, 19]
