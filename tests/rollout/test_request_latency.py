"""A rollout's request latency is the whole backend call, whichever API and streaming mode.

Streamed, a backend times the first token (``ttft``) and the rest (``generation``) apart; the
collection's ``request_latency_s`` (what ``gymbench tune`` reports as latency) must add them up.
The simulator's prefill is made to dominate: its first step alone lasts :data:`PREFILL_S`, so a
latency that left time to first token out would fall far below that floor.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.builtin.openai_backend import OpenAIBackend
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.sim import InProcessBackend, SimConfig, run_in_simulated_time, running_sim_server
from gymbench.sim.text import count_tokens

PROMPT = "What is 2 + 3? " + "Think it through. " * 22
ENGINE = SimConfig(
    step_base_s=0.01, step_per_seq_s=0.0, prefill_per_token_s=0.004, output_tokens_mean=4, max_num_seqs=8
)
PREFILL_S = ENGINE.step_base_s + count_tokens(PROMPT) * ENGINE.prefill_per_token_s
TASKS = 2


def write_tasks(path: Path) -> Path:
    rows = [{"responses_create_params": {"input": PROMPT}, "expected_answer": "5"} for _ in range(TASKS)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


async def collect(backend: object, tasks: Path, out: Path, clock: object = None) -> dict[str, float]:
    settings = CollectSettings(tasks, out, overwrite=True)
    extra = {"clock": clock} if clock is not None else {}
    stats = await Collector(settings, backend, ExactMatchVerifier(), SemaphoreStrategy(2), **extra).run()  # type: ignore[arg-type]
    assert stats.completed == TASKS
    return stats.summary()["request_latency_s"]


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_streamed_and_whole_requests_both_count_time_to_first_token(tmp_path: Path, api: str) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    with running_sim_server(ENGINE) as server:
        latencies = {}
        for stream in (False, True):
            backend = OpenAIBackend(
                OpenAISettings(base_url=server.base_url, model=ENGINE.model, api=api, stream=stream)
            )
            latencies[stream] = asyncio.run(collect(backend, tasks, tmp_path / f"out-{stream}.jsonl"))
    floor = PREFILL_S + 3 * ENGINE.step_base_s  # the prefill step, then three more tokens
    for latency in latencies.values():
        assert latency["p50"] >= floor


def test_in_simulated_time_the_request_latency_is_the_engines(tmp_path: Path) -> None:
    async def main() -> dict[str, float]:
        async with InProcessBackend(ENGINE) as backend:
            tasks = write_tasks(tmp_path / "t.jsonl")
            return await collect(backend, tasks, tmp_path / "o.jsonl", asyncio.get_running_loop().time)

    latency = run_in_simulated_time(main())
    # two at a time: each pair is prefilled in one step, then three more steps
    expected = PREFILL_S + count_tokens(PROMPT) * ENGINE.prefill_per_token_s + 3 * ENGINE.step_base_s
    assert latency["p50"] == pytest.approx(expected, abs=1e-9) and latency["p99"] == pytest.approx(expected, abs=1e-9)
