"""RL policy-step benchmarks: phases by precision and checkpointing, packing against padding, and
the OOM search's answer checked in ordinary processes against a bisection of the true boundary.

Timings compare settings side by side: every round runs each variant once, in a rotating order,
on sessions with the same seed (so the same batches in the same order), and the figures are
medians over rounds. The machine is shared, so absolute times drift; the load average at the start
and end of each case is in the record. ``--gymbench-quick`` shrinks everything to prove it runs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from gymbench import Recorder
from gymbench.train.backoff import cpu_trials
from gymbench.train.config import TrainConfig
from gymbench.train.oom import SearchPlan, Trial, largest_batch_that_fits
from gymbench.train.plugin import build_mlp, build_transformer
from gymbench.train.runner import StepTimings, run_steps
from gymbench.train.session import TrainSession

MiB = 1 << 20
RL = TrainConfig(
    model="transformer",
    model_config={"size": "small", "d_model": 128},
    step="rl",
    batch=16,
    seq_len=256,
    lengths="skewed",
    packing=True,
    steps=3,
    warmup=0,
    threads=1,
)
TINY_RL = replace(RL, model_config={"size": "tiny"}, batch=8, seq_len=32, min_len=4)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def interleaved(sessions: dict[str, TrainSession], rounds: int) -> dict[str, list[StepTimings]]:
    """Each round runs every session once; the order rotates so no variant always goes first."""
    names = list(sessions)
    for session in sessions.values():
        session.step()  # warm-up: thread pool, allocator, optimizer state
    timings: dict[str, list[StepTimings]] = {name: [] for name in names}
    for index in range(rounds):
        for name in names[index % len(names) :] + names[: index % len(names)]:
            timings[name].append(run_steps(sessions[name]))
    return timings


def median_of(rounds: list[StepTimings], pick: Callable[[StepTimings], list[float]]) -> list[float]:
    """Per round, the median over its steps: one sample per round."""
    return [float(np.median(pick(timing))) for timing in rounds]


def per_round_ratio(a: list[float], b: list[float]) -> list[float]:
    return [y / x for x, y in zip(a, b, strict=True)]


VARIANTS = {
    "fp32": {"precision": "fp32"},
    "fp32_ckpt": {"precision": "fp32", "checkpointing": "on"},
    "bf16": {"precision": "bf16"},
    "bf16_ckpt": {"precision": "bf16", "checkpointing": "on"},
}


def test_rl_step_phases_by_precision_and_checkpointing(gymbench: Recorder) -> None:
    config = TINY_RL if gymbench.quick else RL
    sessions = {name: TrainSession(build_transformer, replace(config, **changes)) for name, changes in VARIANTS.items()}
    started = load()
    timings = interleaved(sessions, 2 if gymbench.quick else 12)
    base_step = median_of(timings["fp32"], lambda t: t.step_s)
    for name, rounds in timings.items():
        step = median_of(rounds, lambda t: t.step_s)
        gymbench.record(f"{name}_step_time", step, "s", "lower")
        gymbench.record(f"{name}_tokens_per_s", median_of(rounds, lambda t: t.tokens_per_s), "tokens/s", "higher")
        gymbench.record(f"{name}_time_vs_fp32", per_round_ratio(base_step, step), "ratio", "lower")
        for phase in sessions[name].phases:
            gymbench.record(f"{name}_phase_{phase}", median_of(rounds, lambda t, p=phase: t.phases_s[p]), "s", "lower")
    gymbench.extra.update(config=config.to_dict(), load_start=started, load_end=load(), rounds=len(base_step))


@pytest.mark.parametrize("step", ["rl", "lm"])
def test_packing_against_padding_on_skewed_lengths(gymbench: Recorder, step: str) -> None:
    config = replace(TINY_RL if gymbench.quick else replace(RL, seq_len=512), step=step)
    sessions = {
        name: TrainSession(build_transformer, replace(config, packing=name == "packed"))
        for name in ("padded", "packed")
    }
    started = load()
    timings = interleaved(sessions, 2 if gymbench.quick else 8)
    padded, packed = (median_of(timings[name], lambda t: t.tokens_per_s) for name in ("padded", "packed"))
    gymbench.record("packed_tokens_per_s_vs_padded", per_round_ratio(padded, packed), "x", "higher")
    gymbench.record("padded_tokens_per_s", padded, "tokens/s", "higher")
    gymbench.record("packed_tokens_per_s", packed, "tokens/s", "higher")
    for name, rounds in timings.items():
        share = float(np.mean([timing.padding_share for timing in rounds]))
        gymbench.record(f"{name}_padding_share", share, "ratio", "lower")
    tokens = [c.tokens for timing in timings["packed"] for c in timing.counts]
    gymbench.extra.update(
        config=config.to_dict(), load_start=started, load_end=load(), mean_tokens=float(np.mean(tokens))
    )


# --------------------------------------------------------------------------- OOM search, unseen shapes

SHAPES = {
    "transformer-small-seq256": (
        build_transformer,
        TrainConfig(model="transformer", model_config={"size": "small"}, seq_len=256, threads=1),
        640,
    ),
    "rl-skewed512-packed": (
        build_transformer,
        replace(RL, seq_len=512, batch=4, group_size=4, steps=1),
        512,
    ),
    "rl-bf16-ckpt-seq192": (
        build_transformer,
        replace(RL, lengths="fixed", packing=False, seq_len=192, precision="bf16", checkpointing="on", batch=4),
        384,
    ),
    "mlp-small": (build_mlp, TrainConfig(model="mlp", model_config={"size": "small"}, threads=1), 384),
}


def bisect_boundary(try_batch: Callable[[int, str], Trial], fits: int, fails: int) -> tuple[int, int]:
    """The largest size that fits, to one sample, by plain bisection from a known fit and failure."""
    trials = 0
    while fails - fits > 1:
        middle = (fits + fails) // 2
        trials += 1
        if try_batch(middle, "bisect").fits:
            fits = middle
        else:
            fails = middle
    return fits, trials


@pytest.mark.parametrize("shape", list(SHAPES))
def test_oom_search_holds_in_a_default_allocator_process(gymbench: Recorder, shape: str) -> None:
    build, config, budget_mib = SHAPES[shape]
    if gymbench.quick:
        if shape != "mlp-small":
            pytest.skip("quick mode runs one shape")
        config, budget_mib = replace(config, model_config={"size": "tiny"}), 48
    started = load()
    budget = budget_mib * MiB
    try_batch = cpu_trials(build, config, budget, steps=2, allocator="default")
    plan = SearchPlan(budget_bytes=budget, verify_runs=3)
    if gymbench.quick:
        plan = replace(plan, start=256, tolerance=0.5, verify_runs=1)
    result = largest_batch_that_fits(try_batch, plan)
    gymbench.record("chosen", result.chosen, "samples", "higher")
    gymbench.record("search_trials", result.search_trials, "trials", "lower")
    gymbench.record("verification_pass_rate", result.pass_rate, "ratio", "higher")
    gymbench.record("verification_backoffs", result.backoffs, "backoffs", "lower")
    gymbench.extra.update(search=result.to_dict(), budget_mib=budget_mib, config=config.to_dict())
    if not gymbench.quick:
        low = min(result.chosen, result.largest_fit)
        high = result.first_failure or 2 * result.largest_fit
        truth, trials = bisect_boundary(try_batch, low // 2, 2 * high)
        gymbench.record("true_boundary", truth, "samples", "higher")
        gymbench.record("chosen_below_boundary", 1 - result.chosen / truth, "ratio", "lower")
        boundary_runs = [try_batch(truth, "verify").fits for _ in range(3)]
        gymbench.record("boundary_pass_rate", sum(boundary_runs) / 3, "ratio", "higher")
        gymbench.extra["bisection_trials"] = trials
        fixed = largest_batch_that_fits(cpu_trials(build, config, budget, steps=2, allocator="fixed"), plan)
        in_default = [try_batch(fixed.chosen, "verify").fits for _ in range(3)]
        gymbench.record("fixed_allocator_chosen", fixed.chosen, "samples", "higher")
        gymbench.record("fixed_chosen_passes_in_default", sum(in_default) / 3, "ratio", "higher")
    gymbench.extra.update(load_start=started, load_end=load(), trial_seconds=sum(t.seconds for t in result.trials))
    assert math.isfinite(result.pass_rate)
