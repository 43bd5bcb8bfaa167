"""What the verdict cache and the off-loop pool gain, measured side by side in one run.

* Cache: rows/s of each verifier judging rows it has seen (cache hits) against judging them
  afresh, through the same :class:`VerificationRunner` the engine uses.
* Bottleneck: a collection of code tasks from the simulator where the ``code`` verifier (a
  confined interpreter per test case) is the slowest stage: verification inline on the event
  loop, in a 4-thread pool, and in the pool with a disk cache warmed by an identical earlier run
  (a fresh simulator with the same seed answers identically).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from test_verifiers import code_rows, text_rows

from gymbench import Recorder
from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.openai_backend import OpenAIBackend
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.rollout.dataset import TaskSlice
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.rollout.verification import VerificationRunner, VerifySettings
from gymbench.sim import running_sim_server
from gymbench.testing import make_plugins

CODE_TASKS = Path(__file__).resolve().parents[1] / "gymbench" / "data" / "example_code_tasks.jsonl"
FAST_SIM = {"model": "m", "step_base_s": 0.002, "step_per_seq_s": 0.0, "output_tokens_mean": 8, "seed": 3}


async def judge_rows(runner: VerificationRunner, rows: list[tuple[Any, str]]) -> None:
    for index, (row, text) in enumerate(rows):
        await runner.judge(index, 0, row, text)


CODE_IN_SUBPROCESSES = pytest.param("code", {}, marks=pytest.mark.gymbench(ab=False))
"""The code verifier runs each program in a process of its own: a worker's CPU time misses that work."""


@pytest.mark.parametrize(
    ("name", "config"), [("exact-match", {}), ("regex", {"group": 1}), ("math", {}), CODE_IN_SUBPROCESSES]
)
def test_cache_rows_per_s(gymbench: Recorder, name: str, config: dict[str, Any]) -> None:
    verifier = make_plugins().verifier(name, config)
    count = (2 if gymbench.quick else 6) if name == "code" else (20 if gymbench.quick else 200)
    rows = code_rows(count, 0) if name == "code" else text_rows(count, 0)
    runner = VerificationRunner(verifier, VerifySettings(name=name, pool="inline", cache_size=100_000))
    cold = VerificationRunner(verifier, VerifySettings(name=name, pool="inline", cache_size=0))

    async def both() -> None:
        await gymbench.ameasure(judge_rows, cold, rows, metric="uncached")
        await judge_rows(runner, rows)  # warm the cache
        await gymbench.ameasure(judge_rows, runner, rows, metric="cached")

    asyncio.run(both())
    uncached, cached = gymbench.metrics["uncached"].value, gymbench.metrics["cached"].value
    gymbench.record("uncached_rows_per_s", count / uncached, "rows/s", "higher")
    gymbench.record("cached_rows_per_s", count / cached, "rows/s", "higher")
    gymbench.record("cache_speedup", uncached / cached, "ratio", "higher")


async def collect_code(tmp: Path, rollouts: int, verify: VerifySettings, tag: str) -> float:
    with running_sim_server(**FAST_SIM) as server:
        backend = OpenAIBackend(OpenAISettings(base_url=server.base_url, model="m"))
        settings = CollectSettings(
            CODE_TASKS, tmp / f"{tag}.jsonl", selection=TaskSlice(limit=rollouts), overwrite=True, verify=verify
        )
        # A generous wall clock: a loaded CI runner may take seconds to start an interpreter.
        verifier = make_plugins().verifier("code", {"timeout_s": 60})
        stats = await Collector(settings, backend, verifier, SemaphoreStrategy(16)).run()
    assert stats.completed == rollouts
    return stats.completed / stats.elapsed_s


def test_verification_bottleneck(gymbench: Recorder, tmp_path: Path) -> None:
    rollouts = 8 if gymbench.quick else 40
    cache = str(tmp_path / "verdicts.sqlite")

    async def runs() -> dict[str, float]:
        inline = await collect_code(tmp_path, rollouts, VerifySettings(name="code", pool="inline"), "inline")
        pooled = await collect_code(tmp_path, rollouts, VerifySettings(name="code", workers=4), "pooled")
        await collect_code(tmp_path, rollouts, VerifySettings(name="code", workers=4, cache_path=cache), "warm")
        cached = await collect_code(tmp_path, rollouts, VerifySettings(name="code", workers=4, cache_path=cache), "hit")
        return {"inline": inline, "pool": pooled, "pool_and_cache": cached}

    rates = asyncio.run(runs())
    for mode, rate in rates.items():
        gymbench.record(f"{mode}_rollouts_per_s", rate, "rollouts/s", "higher")
    gymbench.record("pool_over_inline", rates["pool"] / rates["inline"], "ratio", "higher")
    gymbench.record("cache_over_pool", rates["pool_and_cache"] / rates["pool"], "ratio", "higher")
