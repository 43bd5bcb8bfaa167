"""The true throughput curve of a simulated server, and its true knee, by a dense grid of closed loops.

For every whole parallelism ``p`` in a range, ``p`` coroutines each send the sample's tasks (in
the order a probe sends them, pass after pass) to an in-process simulator and send the next the
moment one returns: a closed loop, in simulated time, so exact and free of any machine's load.
After a warm-up of ``WARMUP_TURNOVERS`` turnovers, the server's own generated-token counter is
read over ``MEASURE_TURNOVERS`` more (at least ``MIN_MEASURED`` completions); rollouts/s is that
token rate ÷ the exact mean output length of the simulator's length distribution. The token rate
of a batch engine is steady, so a long window pins it to a fraction of a percent, and dividing by
the distribution's exact mean (not the sample's) makes every point of the curve the long-run rate.

The true knee is :func:`gymbench.tune.curves.knee_of` over this grid: the same function the tuner uses.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gymbench.jsonio import loads
from gymbench.sim import InProcessBackend, SimConfig, run_in_simulated_time
from gymbench.tune.curves import KNEE_FRACTION, knee_of
from gymbench.types import GenerationRequest

WARMUP_TURNOVERS = 3
MEASURE_TURNOVERS = 40
MIN_MEASURED = 2000


def sample_rows(path: Path, size: int) -> list[dict[str, Any]]:
    rows = [loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows[:size]


def mean_output_tokens(config: SimConfig) -> float:
    """The exact mean of the simulator's output length (``max(1, min(drawn, cap))``)."""
    mean, cap = config.output_tokens_mean, config.max_output_tokens
    if config.output_tokens_dist == "uniform":
        return sum(min(k, cap) for k in range(1, 2 * mean)) / (2 * mean - 1)
    if config.output_tokens_dist == "exponential":
        total, k = 0.0, 0
        while k < cap and k < 60 * mean:  # P(round(X) = k) for X ~ Exp(mean)
            total += (math.exp(-max(0.0, k - 0.5) / mean) - math.exp(-(k + 0.5) / mean)) * max(1, k)
            k += 1
        return total + math.exp(-max(0.0, k - 0.5) / mean) * min(k, cap)
    return float(min(mean, cap))


def closed_loop_tokens_per_s(
    config: SimConfig, rows: Sequence[Mapping[str, Any]], parallelism: int, least: int = MIN_MEASURED
) -> float:
    """Generated tokens/s of ``parallelism`` closed-loop clients in steady state (simulated time)."""

    async def main() -> float:
        backend = InProcessBackend(config)
        loop = asyncio.get_running_loop()
        tasks = itertools.cycle(rows)
        warmup = WARMUP_TURNOVERS * parallelism
        measured = max(least, MEASURE_TURNOVERS * parallelism)
        done = 0
        marks: dict[str, tuple[float, int]] = {}
        async with backend:
            engine = backend.service.engine

            async def client() -> None:
                nonlocal done
                while done < warmup + measured:
                    row = next(tasks)
                    try:
                        await backend.generate(GenerationRequest(0, 0, row["responses_create_params"], row))
                    except Exception:  # noqa: BLE001 - a refused request is simply sent again
                        await asyncio.sleep(0.01)
                        continue
                    done += 1
                    if done in (warmup, warmup + measured):
                        marks.setdefault(str(done), (loop.time(), engine.stats.generation_tokens))

            await asyncio.gather(*(client() for _ in range(parallelism)))
        (t0, g0), (t1, g1) = marks[str(warmup)], marks[str(warmup + measured)]
        return (g1 - g0) / (t1 - t0)

    return run_in_simulated_time(main())


def true_curve(
    config: SimConfig, rows: Sequence[Mapping[str, Any]], parallelisms: Sequence[int], least: int = MIN_MEASURED
) -> dict[int, float]:
    """Rollouts/s at each parallelism: the closed loop's token rate ÷ the exact mean length."""
    mean = mean_output_tokens(config)
    return {p: closed_loop_tokens_per_s(config, rows, p, least) / mean for p in parallelisms}


def dense_grid(formula_knee: float, saturation: int, top: int) -> list[int]:
    """Every whole number up to well past the knee, then a sparser tail out to ``top`` for the plateau."""
    dense = max(8, math.ceil(1.6 * max(formula_knee, saturation)))
    tail = sorted({round(dense * 1.25**k) for k in range(1, 40) if dense * 1.25**k <= top} | {top})
    return list(range(1, dense + 1)) + [p for p in tail if p > dense]


def true_knee(curve: Mapping[int, float]) -> tuple[float, float]:
    """(knee, plateau) of a true curve, by the tuner's own definition."""
    plateau = max(curve.values())
    return knee_of(curve, plateau, KNEE_FRACTION), plateau
