"""The collection loop: dispatch under a concurrency strategy, write each rollout as it lands.

At most ``limit`` rollouts (the strategy's slots) exist as tasks at once: the loop takes a slot
before it reads on, so memory stays O(parallelism) however long the input (NeMo Gym #3006).
The per-rollout path does only what it must: one backend call, one verification, one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from gymbench.errors import GymbenchError
from gymbench.rollout.agent_metrics import failures_path
from gymbench.rollout.dataset import (
    DatasetError,
    Task,
    TaskSlice,
    TaskStream,
    check_resumable_input,
    count_selected,
    open_tasks,
)
from gymbench.rollout.guard import FailureBreaker, RunProblems, StopConditions
from gymbench.rollout.latency import Slo, rollout_timings
from gymbench.rollout.lean_gc import hold_gc
from gymbench.rollout.output import (
    ResumeState,
    RolloutWriter,
    check_output_path,
    load_resume_state,
    pair_key,
    refuse_to_overwrite,
)
from gymbench.rollout.phases import UNDECIDED, Dispatched, Phases
from gymbench.rollout.rows import build_row, count_row
from gymbench.rollout.run_settings import RunPolicy
from gymbench.rollout.stats import CollectStats
from gymbench.rollout.verification import Judgement, VerificationRunner, VerifySettings
from gymbench.rollout.verify_cache import check_cache_file
from gymbench.settings import with_defaults
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
    observes,
)

Progress = Callable[[int, CollectStats], None]


@dataclass
class CollectSettings(RunPolicy):
    """One collection as the engine runs it; the policy's ``stop_after_failures`` is 0 (never) here,
    20 on the command line."""

    input_path: Path
    output_path: Path
    selection: TaskSlice = field(default_factory=TaskSlice)
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """Merged into every row's ``responses_create_params`` (temperature, max_output_tokens, ...)."""
    verify: VerifySettings = field(default_factory=VerifySettings)
    row_defaults: Mapping[str, Any] = field(default_factory=dict)
    """Fields every row gets unless it has its own: NeMo Gym's ``+agent_name`` is each row's default
    ``agent_ref``, so the backend routes by it and failed rows name their agent too."""
    failures_apart: bool = False
    """NeMo Gym 0.7.0's layout (a run through its agents): failed rollouts go to
    :func:`~gymbench.rollout.agent_metrics.failures_path`, so the output holds only scored rows
    that training and ``gym eval aggregate`` can read as they are."""

    @property
    def failures_path(self) -> Path | None:
        """The failures sidecar this run writes, or ``None`` when failed rows stay in the output."""
        return failures_path(self.output_path) if self.failures_apart else None


CollectSettings = with_defaults(CollectSettings, stop_after_failures=0)  # type: ignore[misc]


def preflight(settings: CollectSettings) -> TaskStream:
    """Check input and output before any server starts; the opened input is handed to the run.

    The input is opened exactly once (a pipe cannot be read twice): the first task is parsed
    here, and the returned stream, that task included, is what :meth:`Collector.run` reads.
    """
    check_output_path(settings.input_path, settings.output_path)
    if settings.resume:
        check_resumable_input(settings.input_path)
    elif not settings.overwrite:
        refuse_to_overwrite(settings.output_path, settings.failures_path)
    if settings.verify.cache_path:
        check_cache_file(settings.verify.cache_path)
    return open_tasks(settings.input_path, settings.selection)


class Collector:
    def __init__(
        self,
        settings: CollectSettings,
        backend: Backend,
        verifier: Verifier,
        strategy: ConcurrencyStrategy,
        on_progress: Progress | None = None,
        clock: Callable[[], float] = time.perf_counter,
        tasks: TaskStream | None = None,
    ) -> None:
        self.settings = settings
        self.tasks = tasks
        """The opened input (from :func:`preflight`); ``None`` opens it when the run starts."""
        self.clock = clock
        """Seconds, monotonic; a simulated-time test passes its event loop's ``time``."""
        self.backend = backend
        self.verification = VerificationRunner(verifier, settings.verify)
        self.strategy = strategy
        self.on_progress = on_progress or (lambda done, stats: None)
        self.on_rollout: Callable[[Mapping[str, float]], None] | None = None
        """Called with each rollout's stage timings (the tuner measures occupancy with it)."""
        self.on_failure: Callable[[GenerationFailed], None] | None = None
        """Called with each failed rollout's failure (the command line warns on the first of a kind)."""
        self.slo = Slo()
        """Latency objectives for goodput (``+slo_ttft_ms``, ``+slo_e2e_ms``); none by default."""
        self.stats = CollectStats(clock=clock)
        self.stopped_early = False
        self.problems = RunProblems()
        self.breaker = FailureBreaker(settings.stop_after_failures)
        self.stop_conditions = StopConditions(
            settings.stop_after_errors, settings.stop_at_error_rate, settings.error_rate_min_rollouts
        )
        self.phases: Phases | None = None
        self._observes = True
        """The strategy's ``observe`` uses its outcome (read when the run starts: :func:`observes`)."""
        self._held: list[_Landed] = []
        """Rollouts that may yet be cool-down: their rows wait until that is known (:mod:`phases`)."""
        self.resume_state: ResumeState | None = None
        """The earlier rows, read before any server started (:func:`load_resume_state`); ``None``:
        read when the run starts, if it resumes."""
        self._writer: RolloutWriter | None = None
        self._failures: RolloutWriter | None = None
        """The failures sidecar's writer (``settings.failures_apart``); ``None``: failed rows go to the output."""
        self._failures_fresh = False
        """The sidecar was created by this run (not appended to on a resume)."""
        self._pending: set[asyncio.Task[None]] = set()
        self._pairs: dict[asyncio.Future[None], tuple[int, int]] = {}
        """Each rollout in flight's (task_index, rollout_index), so a cancelled one can be named."""

    def _drop_empty_sidecar(self) -> None:
        """A sidecar this run created and wrote nothing to is removed: a run refused before its first
        rollout (a head server that does not answer) leaves no file it was not named, and one with no
        failures none to read (NeMo Gym's readers check that it exists)."""
        path = self.settings.failures_path
        if path is None or not self._failures_fresh or self._failures is None or self._failures.rows_written:
            return
        with contextlib.suppress(OSError):
            if path.stat().st_size == 0:
                path.unlink()

    def planned(self) -> int | None:
        """Rollouts the selection yields (``None`` for a pipe, which cannot be counted ahead)."""
        return count_selected(self.settings.input_path, self.settings.selection)

    async def run(self) -> CollectStats:
        cfg = self.settings
        tasks = self.tasks if self.tasks is not None else open_tasks(cfg.input_path, cfg.selection)
        self.tasks = None  # a stream is read once
        try:
            state = self.resume_state
            if state is None and cfg.resume:
                state = load_resume_state(cfg.output_path, cfg.max_attempts, cfg.failures_path)
            if state is None and not cfg.overwrite:
                refuse_to_overwrite(cfg.output_path, cfg.failures_path)
            self._writer = RolloutWriter(cfg.output_path, append=state is not None)
            if cfg.failures_path is not None:  # appended on resume, as NeMo Gym appends it
                self._failures = RolloutWriter(cfg.failures_path, append=state is not None)
                self._failures_fresh = state is None
        except BaseException:
            tasks.close()
            if self._writer is not None:  # the sidecar could not be opened: nothing was written to the output
                with contextlib.suppress(GymbenchError):
                    self._writer.close()
            raise
        self.problems = RunProblems()
        pending = self._pending
        gc_hold = hold_gc()  # the collector's share of the client's CPU (rollout/lean_gc.py)
        try:
            self.verification.start()
            async with self.backend:
                self.stats = CollectStats(clock=self.clock, slo=self.slo)
                self.phases = self._phases()
                self._observes = observes(self.strategy)
                complete = True  # the strategy's schedule was done (a trace's end, a search that converged)
                try:
                    try:
                        complete = await self._dispatch(iter(tasks), state)
                    except StopDispatch as stop:
                        self.stopped_early = True
                        self.stats.stopped = self.stats.stopped or str(stop) or None
                    except DatasetError:
                        self._end_dispatch(complete=False)
                        await self._drain()  # a bad row later on: let in-flight rollouts land
                        raise
                    self._end_dispatch(complete)
                    await self._drain()
                finally:
                    # Cut short (Ctrl-C, an error): cancel what is in flight while the backend is still
                    # open, so no rollout meets a closed session and lands as a false failed row.
                    await self._cancel(pending)
        finally:
            gc_hold.release()
            await self._cancel(pending)
            self._end_dispatch(complete=False)  # no-op unless the run was cut short (cancelled, an error)
            self.stats.finished = self.clock()
            arrivals = getattr(self.strategy, "arrival_summary", None)
            if callable(arrivals):
                self.stats.arrivals = arrivals()
            self.stats.client.finish()
            self.stats.settle()  # the last batch of landed rollouts, for whoever reads the figures
            tasks.close()
            self._close_writer(self._writer)
            if self._failures is not None:
                self._close_writer(self._failures)
                self._drop_empty_sidecar()
            self.verification.close()
            self._count_cache()
        return self.stats

    def _phases(self) -> Phases | None:
        cfg = self.settings
        if not (cfg.warmup_rollouts or cfg.warmup_s or cfg.cooldown_rollouts or cfg.cooldown_s):
            return None
        planned = self.planned() if cfg.cooldown_rollouts else None
        return Phases(self.clock, cfg.warmup_rollouts, cfg.warmup_s, cfg.cooldown_rollouts, cfg.cooldown_s, planned)

    def _end_dispatch(self, complete: bool) -> None:
        """Dispatching is over: every held rollout's phase is known now; write them. ``complete``:
        the selection (or the strategy's schedule) was done, so the cool-down by time applies."""
        if self.phases is not None:
            self.phases.end_dispatch(complete)
            self._release_held()

    def _close_writer(self, writer: RolloutWriter | None) -> None:
        """A write that failed (a full disk) stops the run like any internal error: the summary is
        still said, with every rollout whose row is not whole in the file, for a resume to redo."""
        if writer is None:  # the run did not get as far as opening it
            return
        try:
            writer.close()
        except GymbenchError as exc:
            self.problems.add_error("the rollout writer", exc, None, written=True)
        named = set(self.problems.unwritten)
        self.problems.unwritten.extend(pair for pair in writer.lost() if pair not in named)

    @staticmethod
    async def _cancel(pending: set[asyncio.Task[None]]) -> None:
        for job in pending:
            job.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def _drain(self) -> None:
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    async def _dispatch(self, tasks: Any, state: ResumeState | None) -> bool:
        """Dispatch the selection; True when all of it was, False when the run stopped short.

        A rollout's position counts every task the selection yields, those a resume skips too,
        so the cool-down by count flags the same rollouts whether or not the run was resumed."""
        for position, task in enumerate(tasks):
            if self.problems.halted or self.stats.stopped:
                return False
            key = pair_key(task.task_index, task.rollout_index)
            if state is not None and key in state.done:
                self.stats.skipped += 1
                continue
            attempt = (state.attempts.get(key, 0) if state is not None else 0) + 1
            ready = self.clock()
            try:
                slot = self.strategy.slot()
                await slot.__aenter__()
            except StopDispatch:
                raise
            except Exception as exc:  # a broken strategy: stop dispatching, let what is in flight land
                self.problems.add_error(f"the strategy {type(self.strategy).__name__}'s slot()", exc, None, True)
                return False
            if self.problems.halted or self.stats.stopped:  # it stopped while we waited for the slot
                try:
                    await slot.__aexit__(None, None, None)
                except Exception as exc:  # said once, as every slot failure is
                    self.problems.add_error(f"the strategy {type(self.strategy).__name__}'s slot", exc, None, True)
                return False
            late = getattr(slot, "late_s", None)  # an open-loop slot: how late it went out, not the wait
            slot_wait = late if isinstance(late, float) else self.clock() - ready
            mark = self.phases.dispatch(position) if self.phases is not None else None
            job = asyncio.ensure_future(self._one(task, attempt, slot, slot_wait, mark))
            self._pending.add(job)
            self._pairs[job] = (task.task_index, task.rollout_index)
            job.add_done_callback(self._job_done)
        return True

    def _job_done(self, job: asyncio.Task[None]) -> None:
        """Every rollout task ends here; an exception it let out is reported, never lost."""
        self._pending.discard(job)
        pair = self._pairs.pop(job, None)
        if job.cancelled():
            self.problems.cancelled += 1
            if pair is not None:
                self.problems.cancelled_pairs.append(pair)
        elif job.exception() is not None:
            self.problems.add_error("a rollout", job.exception(), None, written=False)  # type: ignore[arg-type]

    async def _one(
        self,
        task: Task,
        attempt: int,
        slot: AbstractAsyncContextManager[None],
        slot_wait: float,
        mark: Dispatched | None = None,
    ) -> None:
        pair = (task.task_index, task.rollout_index)
        written = False
        where = "the backend"
        if self.settings.row_defaults:
            task = Task(task.task_index, task.rollout_index, {**self.settings.row_defaults, **task.row})
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
            where = _OBSERVE  # named in full only if it fails: an f-string per rollout cost CPU
            if self._observes:
                self.strategy.observe(_outcome(generated - started, generation, failure))
            where = "verification"
            judgement = await self._judge(task, generation) if generation is not None else None
            finished = self.clock()
            timings = rollout_timings(slot_wait, generation, generated - started, finished - generated)
            row = build_row(task, attempt, params, generation, failure, judgement, timings, self.settings.verify.name)
            where = "the rollout writer"
            if self.phases is None:  # no warm-up or cool-down: nothing is held
                self._land(row, generation, failure, judgement, timings, None)
            else:
                if mark is not None and self.phases.phase(mark) == UNDECIDED:
                    self._held.append(_Landed(row, generation, failure, judgement, timings, mark))
                else:
                    self._land(row, generation, failure, judgement, timings, mark)
                self._release_held()
            written = True
            where = "a progress callback"
            self._after_write(failure, timings)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if where is _OBSERVE:
                where = f"the strategy {type(self.strategy).__name__}'s observe()"
            self.problems.add_error(where, exc, pair, written)
        finally:
            try:
                await slot.__aexit__(None, None, None)
            except Exception as exc:
                self.problems.add_error(f"the strategy {type(self.strategy).__name__}'s slot", exc, None, True)

    def _land(
        self,
        row: dict[str, Any],
        generation: Generation | None,
        failure: GenerationFailed | None,
        judgement: Judgement | None,
        timings: dict[str, float],
        mark: Dispatched | None,
    ) -> None:
        """Write the row, flagged when it is warm-up or cool-down, and count it (those only in the
        counts). The parts come one by one: a :class:`_Landed` per rollout cost 3 k instructions,
        so one is built only for a rollout that is held."""
        phase = self.phases.phase(mark) if self.phases is not None and mark is not None else None
        if phase is not None:
            row["phase"] = phase
            assert self.phases is not None
            self.phases.count(phase)
            self.stats.excluded[phase] = self.stats.excluded.get(phase, 0) + 1
        count_row(self.stats, generation, failure, judgement, timings, phase is None)
        assert self._writer is not None
        if failure is not None and self._failures is not None:
            row["_ng_failure_class"] = failure.kind
            row["_ng_failure_message"] = failure.reason
            self._failures.write(row)
        else:
            self._writer.write(row)

    def _release_held(self) -> None:
        if not self._held or self.phases is None:
            return
        still = []
        for landed in self._held:
            assert landed.mark is not None
            if self.phases.phase(landed.mark) == UNDECIDED:
                still.append(landed)
            else:
                self._land(*landed)
        self._held = still

    def _after_write(self, failure: GenerationFailed | None, timings: Mapping[str, float]) -> None:
        if failure is not None and self.on_failure is not None:
            self.on_failure(failure)
        stop = self.stop_conditions.observe(failure is not None)
        if stop is not None and self.stats.stopped is None:
            self.stats.stopped = stop
        if self.breaker.observe(failure) and not self.problems.halted:
            self.problems.stop_reason = self.breaker.reason()
            self.problems.outage = self.breaker.outage
            for job in self._pending:
                if job is not asyncio.current_task():
                    job.cancel()
        self.on_progress(1, self.stats)
        if self.on_rollout is not None:
            self.on_rollout(timings)

    async def _judge(self, task: Task, generation: Generation) -> Judgement:
        if generation.reward is not None:
            return Judgement(Verdict(generation.reward, {"source": "backend"}))
        return await self.verification.judge(task.task_index, task.rollout_index, task.row, generation.text)

    def _count_cache(self) -> None:
        cache = self.verification.cache
        self.stats.cache_hits = cache.hits if cache is not None else 0
        self.stats.cache_misses = cache.misses if cache is not None else 0
        self.stats.verify_skipped = self.verification.skipped


class _Landed(NamedTuple):
    """A rollout that has landed and is held: its row and what its statistics are made of."""

    row: dict[str, Any]
    generation: Generation | None
    failure: GenerationFailed | None
    judgement: Judgement | None
    timings: dict[str, float]
    mark: Dispatched | None


_OBSERVE = "the strategy's observe()"
"""Where a rollout was when its strategy's ``observe`` raised; the message names the strategy."""


def _outcome(latency: float, generation: Generation | None, failure: GenerationFailed | None) -> RequestOutcome:
    if generation is not None:
        return RequestOutcome(latency, True, None, generation.usage.completion_tokens, generation.retries)
    assert failure is not None
    return RequestOutcome(latency, False, failure.status, 0, failure.retries, failure.rate_limit)
