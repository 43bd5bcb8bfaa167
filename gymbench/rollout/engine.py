"""The collection loop: dispatch under a concurrency strategy, write each rollout as it lands.

At most ``limit`` rollouts (the strategy's slots) exist as tasks at once: the loop takes a slot
before it reads on, so memory stays O(parallelism) however long the input (NeMo Gym #3006).
The per-rollout path does only what it must: one backend call, one verification, one line.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymbench.rollout.dataset import DatasetError, Task, TaskSlice, count_selected, read_tasks
from gymbench.rollout.output import (
    ResumeState,
    RolloutWriter,
    load_resume_state,
    pair_key,
    refuse_to_overwrite,
)
from gymbench.rollout.stats import CollectStats
from gymbench.rollout.verification import Judgement, VerificationRunner, VerifySettings
from gymbench.types import (
    Backend,
    ConcurrencyStrategy,
    Generation,
    GenerationFailed,
    GenerationRequest,
    RequestOutcome,
    StopDispatch,
    Verdict,
    Verifier,
)

Progress = Callable[[int, CollectStats], None]


@dataclass(frozen=True)
class CollectSettings:
    input_path: Path
    output_path: Path
    selection: TaskSlice = field(default_factory=TaskSlice)
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """Merged into every row's ``responses_create_params`` (temperature, max_output_tokens, ...)."""
    resume: bool = False
    overwrite: bool = False
    max_attempts: int = 3
    verify: VerifySettings = field(default_factory=VerifySettings)


def preflight(settings: CollectSettings) -> None:
    """Check the input's first row and the output file before any server is started."""
    next(read_tasks(settings.input_path, settings.selection), None)
    if not settings.resume and not settings.overwrite:
        refuse_to_overwrite(settings.output_path)


class Collector:
    def __init__(
        self,
        settings: CollectSettings,
        backend: Backend,
        verifier: Verifier,
        strategy: ConcurrencyStrategy,
        on_progress: Progress | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.settings = settings
        self.clock = clock
        """Seconds, monotonic; a simulated-time test passes its event loop's ``time``."""
        self.backend = backend
        self.verification = VerificationRunner(verifier, settings.verify)
        self.strategy = strategy
        self.on_progress = on_progress or (lambda done, stats: None)
        self.on_rollout: Callable[[Mapping[str, float]], None] | None = None
        """Called with each rollout's stage timings (the tuner measures occupancy with it)."""
        self.stats = CollectStats(clock=clock)
        self.stopped_early = False
        self._writer: RolloutWriter | None = None

    def planned(self) -> int:
        return count_selected(self.settings.input_path, self.settings.selection)

    async def run(self) -> CollectStats:
        cfg = self.settings
        tasks = read_tasks(cfg.input_path, cfg.selection)
        first = next(tasks, None)  # validates the file before anything is opened or truncated
        state = load_resume_state(cfg.output_path, cfg.max_attempts) if cfg.resume else None
        if state is None and not cfg.overwrite:
            refuse_to_overwrite(cfg.output_path)
        self._writer = RolloutWriter(cfg.output_path, append=state is not None)
        pending: set[asyncio.Task[None]] = set()
        try:
            self.verification.start()
            async with self.backend:
                self.stats = CollectStats(clock=self.clock)
                try:
                    await self._dispatch(_chain(first, tasks), state, pending)
                except StopDispatch:
                    self.stopped_early = True
                except DatasetError:
                    await asyncio.gather(*pending)  # a bad row later on: let in-flight rollouts land
                    raise
                if pending:
                    await asyncio.gather(*pending)
        finally:
            for job in pending:
                job.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            self.stats.finished = self.clock()
            self._writer.close()
            self.verification.close()
            self._count_cache()
        return self.stats

    async def _dispatch(self, tasks: Any, state: ResumeState | None, pending: set[asyncio.Task[None]]) -> None:
        for task in tasks:
            key = pair_key(task.task_index, task.rollout_index)
            if state is not None and key in state.done:
                self.stats.skipped += 1
                continue
            attempt = (state.attempts.get(key, 0) if state is not None else 0) + 1
            ready = self.clock()
            slot = self.strategy.slot()
            await slot.__aenter__()
            job = asyncio.ensure_future(self._one(task, attempt, slot, self.clock() - ready))
            pending.add(job)
            job.add_done_callback(pending.discard)

    async def _one(self, task: Task, attempt: int, slot: AbstractAsyncContextManager[None], slot_wait: float) -> None:
        try:
            params = {**task.row["responses_create_params"], **self.settings.overrides}
            request = GenerationRequest(task.task_index, task.rollout_index, params, task.row)
            started = self.clock()
            generation: Generation | None = None
            failure: GenerationFailed | None = None
            try:
                generation = await self.backend.generate(request)
            except GenerationFailed as exc:
                failure = exc
            except Exception as exc:  # a backend bug must not kill the whole run
                failure = GenerationFailed("backend_error", f"{type(exc).__name__}: {exc}")
            generated = self.clock()
            self.strategy.observe(RequestOutcome(generated - started, failure is None, failure and failure.status))
            judgement = await self._judge(task, generation) if generation is not None else None
            finished = self.clock()
            timings = {
                "slot_wait": slot_wait,
                **(generation.timings if generation is not None else {}),
                "verification": finished - generated,
                "total": slot_wait + finished - started,
            }
            self._record(task, attempt, params, generation, failure, judgement, timings)
        finally:
            await slot.__aexit__(None, None, None)

    async def _judge(self, task: Task, generation: Generation) -> Judgement:
        if generation.reward is not None:
            return Judgement(Verdict(generation.reward, {"source": "backend"}))
        return await self.verification.judge(task.task_index, task.rollout_index, task.row, generation.text)

    def _count_cache(self) -> None:
        cache = self.verification.cache
        self.stats.cache_hits = cache.hits if cache is not None else 0
        self.stats.cache_misses = cache.misses if cache is not None else 0
        self.stats.verify_skipped = self.verification.skipped

    def _record(
        self,
        task: Task,
        attempt: int,
        params: Mapping[str, Any],
        generation: Generation | None,
        failure: GenerationFailed | None,
        judgement: Judgement | None,
        timings: dict[str, float],
    ) -> None:
        row = dict(task.row)
        row["responses_create_params"] = params
        row["task_index"] = task.task_index
        row["rollout_index"] = task.rollout_index
        row["attempt"] = attempt
        retries = generation.retries if generation is not None else failure.retries if failure is not None else 0
        row["retries"] = retries
        stats = self.stats
        stats.retries += retries
        if generation is not None and judgement is not None:
            row["status"] = "ok"
            row["response"] = generation.response
            verdict = judgement.verdict
            row["reward"] = verdict.reward if verdict is not None and verdict.failure_kind is None else None
            row["verifier"] = {
                "name": self.settings.verify.name,
                "details": verdict.details if verdict is not None else {},
                "failure_kind": verdict.failure_kind if verdict is not None else None,
                "cached": judgement.cached,
                "skipped": judgement.skipped_reason,
            }
            row["usage"] = {
                "prompt_tokens": generation.usage.prompt_tokens,
                "completion_tokens": generation.usage.completion_tokens,
            }
            row["failure"] = None
            for key, value in generation.extra.items():
                row.setdefault(key, value)
            stats.completed += 1
            stats.prompt_tokens += generation.usage.prompt_tokens
            stats.completion_tokens += generation.usage.completion_tokens
            if verdict is not None and verdict.failure_kind is None:
                stats.reward_sum += verdict.reward
                stats.rewarded += 1
            elif verdict is not None:
                stats.verify_failures += 1
            stats.latency.add(timings["total"])
            stats.request_latency.add(timings.get("generation", 0.0) + timings.get("connection_wait", 0.0))
        else:
            assert failure is not None
            row["status"] = "failed"
            row["response"] = None
            row["reward"] = None
            row["failure"] = {"kind": failure.kind, "reason": failure.reason, "status": failure.status}
            stats.failed += 1
            stats.failure_kinds[failure.kind] += 1
        row["timings"] = timings
        stats.add_timings(timings)
        assert self._writer is not None
        self._writer.write(row)
        self.on_progress(1, stats)
        if self.on_rollout is not None:
            self.on_rollout(timings)


def _chain(first: Task | None, rest: Any) -> Any:
    if first is not None:
        yield first
        yield from rest
