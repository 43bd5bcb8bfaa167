"""The ``gymbench`` fixture's object: measure any code, or run gymbench's own jobs inside a benchmark.

``gymbench.collect(...)`` takes exactly the settings ``gymbench collect`` takes and runs the same
:class:`~gymbench.collect.driver.Collection`; the standard metrics land in the benchmark, and
the result comes back for assertions. Settings are layered: ``[tool.gymbench.collect]`` in
pyproject.toml, then the pytest options (``--gymbench-backend`` ...), then the call's own. With no
server named, the session's simulator (the ``gymbench_sim`` fixture) answers, started once.

This module is imported by the pytest plugin for every benchmark, so it imports nothing heavy;
each method imports what it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gymbench.errors import GymbenchError
from gymbench.measure import MeasureSettings, Recorder, RoundPacer
from gymbench.pytest.jobs import BenchContext, ConfigSource, fail_test, job_layers
from gymbench.types import JSONObject

if TYPE_CHECKING:
    from gymbench.collect.config import CollectConfig
    from gymbench.collect.driver import Collection
    from gymbench.gate.callgrind import InstructionCounter
    from gymbench.pytest.api_train import TrainResult
    from gymbench.pytest.api_tune import TuneOutcome


@dataclass
class CollectResult:
    """What one ``gymbench.collect(...)`` gave: the summary, where the rows are, and how it ended."""

    summary: dict[str, Any]
    output_path: Path
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def completed(self) -> int:
        return int(self.summary["completed"])

    @property
    def failed(self) -> int:
        return int(self.summary["failed"])

    @property
    def mean_reward(self) -> float | None:
        reward = self.summary["mean_reward"]
        return None if reward is None else float(reward)

    @property
    def rollouts_per_s(self) -> float:
        return float(self.summary["rollouts_per_s"])

    def rows(self) -> Iterator[JSONObject]:
        """The output rows, read back exactly."""
        from gymbench.rollouts_file import RolloutsFile

        return RolloutsFile(self.output_path).rows()


class Benchmark(Recorder):
    """The ``gymbench`` fixture: :meth:`measure`, :meth:`record`, and gymbench's jobs as benchmarks."""

    def __init__(
        self,
        settings: MeasureSettings,
        context: BenchContext,
        *,
        counter: InstructionCounter | None = None,
        pacer: RoundPacer | None = None,
    ) -> None:
        """``counter`` under callgrind, ``pacer`` in an A/B worker: see :class:`Recorder`."""
        super().__init__(settings, counter=counter, pacer=pacer)
        self.context = context

    def add_job(self, job: str, metrics: Mapping[str, Any], prefix: str, context: dict[str, Any]) -> None:
        """A job's metrics into this benchmark (under ``prefix``), its context into ``extra[job]``."""
        for name, metric in metrics.items():
            self.metrics[prefix + name] = metric
        self.extra.setdefault(job, []).append(context)

    def collect(
        self, config: ConfigSource = None, /, *, metric_prefix: str = "", **settings: Any
    ) -> CollectResult | Awaitable[CollectResult]:
        """Collect rollouts exactly as ``gymbench collect`` would, and record the standard metrics.

        In an ``async def`` test, ``await`` it (it runs on the test's event loop); in a plain test
        it runs at once on its own loop (uvloop when installed, as the command line does).
        ``config`` is a mapping or a YAML/JSON file of settings; keyword arguments win over it.
        """
        coroutine = self._collect(config, metric_prefix, settings)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            from gymbench.collect.driver import run_loop

            result: CollectResult = run_loop(coroutine)
            return result
        return coroutine

    def train_step(self, config: ConfigSource = None, /, *, metric_prefix: str = "", **settings: Any) -> TrainResult:
        """Benchmark training steps exactly as ``gymbench train`` would, and record its metrics.

        Records ``step_time`` (samples), ``tokens_per_s``, ``samples_per_s``, ``phase_*``, and,
        when measured, ``peak_memory``, ``achieved_tflops`` and ``mfu``; returns a
        :class:`~gymbench.pytest.api_train.TrainResult`.
        """
        from gymbench.pytest.api_train import run_train

        return run_train(self, config, metric_prefix, settings)

    def find_batch(self, config: ConfigSource = None, /, *, metric_prefix: str = "", **settings: Any) -> TrainResult:
        """The largest batch that fits, searched as ``gymbench train +find_batch=search`` does.

        Records ``largest_fit``, ``chosen_batch`` and ``search_trials`` (and the verification's
        pass rate), so CI notices when a change makes the model need more memory.
        """
        from gymbench.pytest.api_train import run_train

        return run_train(self, config, metric_prefix, {"find_batch": "search", **settings})

    def tune(self, config: ConfigSource = None, /, *, metric_prefix: str = "", **settings: Any) -> TuneOutcome:
        """Find the knee and the recommended parallelism exactly as ``gymbench tune`` would.

        Records ``knee_parallelism``, ``recommended_parallelism``, ``plateau_rollouts_per_s``,
        ``expected_rollouts_per_s`` and ``expected_share_of_plateau``, so CI notices when a change
        moves the knee; returns a :class:`~gymbench.pytest.api_tune.TuneOutcome`. Call it from a
        plain (not ``async``) test: tuning runs its own event loop.
        """
        from gymbench.pytest.api_tune import run_tune

        return run_tune(self, config, metric_prefix, settings)

    async def _collect(self, config: ConfigSource, prefix: str, settings: Mapping[str, Any]) -> CollectResult:
        try:
            collection = await self._run_collection(config, settings)
        except GymbenchError as exc:
            problem = str(exc)
        else:
            return self._collect_outcome(collection, prefix)
        fail_test(self.context, problem)  # outside the handler: no chained traceback

    async def _run_collection(self, config: ConfigSource, settings: Mapping[str, Any]) -> Collection:
        from gymbench.collect.driver import Collection

        collect_config = self._collect_config(config, settings)
        collection = Collection.prepare(collect_config, self.context.plugins(), shared_sim=self.context.sim)
        with contextlib.closing(collection):
            async with collection:
                await collection.run()
        return collection

    def _collect_config(self, config: ConfigSource, settings: Mapping[str, Any]) -> CollectConfig:
        from gymbench.collect.config import CollectConfig
        from gymbench.settings import build_settings

        layers = job_layers(self.context, "collect", config, settings)
        if not any("output_jsonl_fpath" in layer for layer in layers):
            layers.append({"output_jsonl_fpath": str(self.context.workdir() / "rollouts.jsonl")})
        layers.append({"save_results": False, "progress": False})
        return build_settings(CollectConfig, (), *layers, where="gymbench.collect")

    def _collect_outcome(self, collection: Collection, prefix: str) -> CollectResult:
        assert collection.collector is not None
        problems = collection.collector.problems
        if problems.errors or problems.stop_reason:
            reason = problems.stop_reason or "; ".join(problems.errors)
            fail_test(self.context, f"the collection stopped: {reason}")
        result = collection.result()
        summary = result.extra["summary"]
        self.add_job(
            "collect", result.metrics, prefix, {"backend": collection.backend_name, "params": dict(result.params),
                                                "summary": summary}
        )  # fmt: skip
        return CollectResult(summary=summary, output_path=collection.settings.output_path, metrics=dict(result.metrics))
