"""Training-step benchmarks: the step grid, and the figures docs/training.md quotes.

Figures that compare two settings (checkpointing, bf16, the harness against a bare loop) come from
rounds interleaved in one run, as medians of per-round ratios, because the machine is shared and
its speed drifts between runs. ``--gymbench-quick`` shrinks every workload to prove it still runs.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from gymbench import Recorder
from gymbench.pytest.api import Benchmark
from gymbench.train.backoff import cpu_trials, halve_until_it_fits
from gymbench.train.config import TrainConfig
from gymbench.train.oom import SearchPlan, largest_batch_that_fits
from gymbench.train.plugin import build_mlp, build_transformer
from gymbench.train.precision import cpu_flags, native_fp16
from gymbench.train.runner import PhaseClock, StepTimings, keep_step, run_steps
from gymbench.train.session import TrainSession
from gymbench.train.worker import WorkerJob, run_job

MiB = 1 << 20
FACTORIES = {"mlp": build_mlp, "transformer": build_transformer}
FULL = {
    "mlp": TrainConfig(model="mlp", model_config={"size": "small"}, batch=64, threads=1),
    "transformer": TrainConfig(
        model="transformer", model_config={"size": "small", "d_model": 128}, batch=8, seq_len=128, threads=1
    ),
}


def sized(model: str, quick: bool, **changes: object) -> TrainConfig:
    """The benchmark shape, or a tiny one in quick mode; fp16 is always tiny (no CPU fp16 kernels)."""
    config = replace(FULL[model], **{"steps": 8, "warmup": 2, **changes})
    if quick or config.precision == "fp16":
        config = replace(config, model_config={"size": "tiny"}, batch=4, seq_len=32, steps=2, warmup=1)
    return config


def saving(before: int, after: int) -> float:
    return 1 - after / before if before > 0 else math.nan


@pytest.mark.parametrize("accumulation", [1, 2])
@pytest.mark.parametrize("checkpointing", ["off", "on"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_train_step(gymbench: Benchmark, model: str, precision: str, checkpointing: str, accumulation: int) -> None:
    """The grid a user would write: through ``gymbench.train_step``, exactly ``gymbench train``'s settings.

    fp16 on a CPU without fp16 kernels is kept tiny by ``gymbench train`` itself (with a warning).
    """
    config = sized(model, gymbench.quick)
    settings = {key: getattr(config, key) for key in ("model", "batch", "seq_len", "threads", "steps", "warmup")}
    options = {key: value for key, value in config.model_config.items() if key != "size"}
    result = gymbench.train_step(
        settings, size=config.model_config["size"], model_options=options, precision=precision,
        checkpointing=checkpointing, accumulation=accumulation, memory=not gymbench.quick,
    )  # fmt: skip
    assert all(math.isfinite(loss) for loss in result.report.timings.losses) or precision == "fp16"


def paired_ratio(rounds: int, first: Callable[[], float], second: Callable[[], float]) -> list[float]:
    """``second / first`` per round, the two run back to back in alternating order.

    The last element is the ratio of the two minima over all rounds: on a shared machine other
    tenants only ever add time, so the minimum is the steadiest estimate of each side.
    """
    firsts, seconds = [], []
    for index in range(rounds):
        if index % 2:
            seconds.append(second())
            firsts.append(first())
        else:
            firsts.append(first())
            seconds.append(second())
    ratios = [b / a for a, b in zip(firsts, seconds, strict=True)]
    return ratios + [min(seconds) / min(firsts)]


def record_ratio(gymbench: Recorder, name: str, ratios: list[float], unit: str, offset: float = 0.0) -> None:
    """The per-round ratios as samples (median and IQR), the ratio of minima as its own metric."""
    gymbench.record(name, [r - offset for r in ratios[:-1]], unit, "lower" if offset else "higher")
    gymbench.record(f"{name}_of_minima", ratios[-1] - offset, unit, "lower" if offset else "higher")


def median_step(session: TrainSession) -> Callable[[], float]:
    return lambda: float(np.median(run_steps(session).step_s))


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_checkpointing_memory_and_time(gymbench: Recorder, model: str) -> None:
    config = sized(model, gymbench.quick, steps=3, warmup=0)
    if gymbench.quick:  # large enough that the activations show in the RSS
        config = replace(config, batch=256 if model == "mlp" else 32, seq_len=64)
    elif model == "mlp":  # at batch 64 AdamW's temporaries, not activations, set the MLP's peak
        config = replace(config, batch=512)
    plain = run_job(WorkerJob("memory", FACTORIES[model], config))
    saved = run_job(WorkerJob("memory", FACTORIES[model], replace(config, checkpointing="on")))
    gymbench.record("activation_saving", 1 - saved["activation_bytes"] / plain["activation_bytes"], "ratio", "higher")
    gymbench.record("step_peak_saving", 1 - saved["step_peak_bytes"] / plain["step_peak_bytes"], "ratio", "higher")
    sessions = [TrainSession(FACTORIES[model], replace(config, checkpointing=mode)) for mode in ("off", "on")]
    ratios = paired_ratio(2 if gymbench.quick else 10, median_step(sessions[0]), median_step(sessions[1]))
    record_ratio(gymbench, "time_cost", ratios, "ratio", offset=1.0)
    gymbench.extra.update(memory_off=plain, memory_on=saved, label="process RSS")


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_bf16_against_fp32(gymbench: Recorder, model: str) -> None:
    config = sized(model, gymbench.quick, steps=3, warmup=1)
    sessions = [TrainSession(FACTORIES[model], replace(config, precision=p)) for p in ("fp32", "bf16")]
    ratios = paired_ratio(2 if gymbench.quick else 10, median_step(sessions[1]), median_step(sessions[0]))
    record_ratio(gymbench, "bf16_speedup", ratios, "x")


def test_fp16_against_fp32_on_this_cpu(gymbench: Recorder) -> None:
    """The figure the fp16 note quotes: it depends on whether the CPU computes fp16 natively."""
    config = replace(FULL["transformer"], steps=2, warmup=1)
    if gymbench.quick:
        config = replace(config, model_config={"size": "tiny"}, batch=2, seq_len=16)
    sessions = [TrainSession(build_transformer, replace(config, precision=p)) for p in ("fp32", "fp16")]
    ratios = paired_ratio(2 if gymbench.quick else 6, median_step(sessions[0]), median_step(sessions[1]))
    record_ratio(gymbench, "fp16_time_vs_fp32", ratios, "x")
    flags = cpu_flags()
    gymbench.extra.update(native_fp16=native_fp16(flags), avx512_bf16="avx512_bf16" in flags, load=os.getloadavg())


def bare_loop(session: TrainSession, steps: int) -> float:
    """The same steps as the runner with no clock, no memory sample, no bookkeeping."""
    model, optimizer, config = session.model, session.optimizer, session.config
    started = time.perf_counter()
    for _ in range(steps):
        inputs, targets = model.make_batch(config.micro_batch, config.seq_len, session.generator)
        model(inputs, targets).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def harness_loop(session: TrainSession) -> float:
    started = time.perf_counter()
    run_steps(session)
    return time.perf_counter() - started


def cpu_seconds(fn: Callable[[], float]) -> Callable[[], float]:
    """CPU time of one thread's work: other tenants' load inflates wall time, not this."""

    def timed() -> float:
        started = time.process_time()
        fn()
        return time.process_time() - started

    return timed


def test_harness_overhead_against_a_bare_loop(gymbench: Recorder) -> None:
    config = sized("mlp", gymbench.quick, steps=5 if gymbench.quick else 10, warmup=0)
    session = TrainSession(build_mlp, config)
    bare_loop(session, 3)
    rounds = 2 if gymbench.quick else 20
    bare, harness = (lambda: bare_loop(session, config.steps)), (lambda: harness_loop(session))
    wall = paired_ratio(rounds, bare, harness)
    cpu = paired_ratio(rounds, cpu_seconds(bare), cpu_seconds(harness))
    record_ratio(gymbench, "overhead", wall, "ratio", offset=1.0)
    record_ratio(gymbench, "overhead_cpu", cpu, "ratio", offset=1.0)
    bookkeeping = gymbench.measure(harness_bookkeeping, session, metric="bookkeeping_per_step")
    step = float(np.median(run_steps(session).step_s))
    assert bookkeeping.step_s == [0.0]
    gymbench.record("bookkeeping_share", gymbench.metrics["bookkeeping_per_step"].value / step, "ratio", "lower")
    gymbench.extra["steps_per_round"] = config.steps


def harness_bookkeeping(session: TrainSession) -> StepTimings:
    """Everything ``run_steps`` adds to a step, on its own: four timed phases and the bookkeeping."""
    clock, timings = PhaseClock(session), StepTimings()
    clock.start()
    for phase in session.phases:
        with clock.phase(phase):
            pass
    keep_step(timings, clock, 0.0, session)
    return timings


def test_oom_search_against_a_grid(gymbench: Recorder) -> None:
    config = replace(FULL["mlp"], model_config={"size": "tiny" if gymbench.quick else "small"})
    budget = (48 if gymbench.quick else 256) * MiB
    try_batch = cpu_trials(build_mlp, config, budget, steps=2)
    plan = SearchPlan(budget_bytes=budget)
    if gymbench.quick:
        plan = replace(plan, start=256, tolerance=0.5, verify_runs=1)
    result = largest_batch_that_fits(try_batch, plan)
    gymbench.record("search_trials", result.search_trials, "trials", "lower")
    gymbench.record("trial_allowance", math.log2(result.largest_fit) + 4, "trials", "higher")
    gymbench.record("verification_pass_rate", result.pass_rate, "ratio", "higher")
    gymbench.record("largest_fit", result.largest_fit, "samples", "higher")
    gymbench.extra["search"] = result.to_dict()
    if not gymbench.quick:
        truth = grid_truth(try_batch, result.largest_fit)
        gymbench.record("fit_vs_grid", result.largest_fit / truth, "ratio", "higher")
        gymbench.extra["grid_truth"] = truth
    halving = halve_until_it_fits(build_mlp, replace(config, batch=1 << 14), budget)
    gymbench.record("halving_settled", halving[-1].batch if halving[-1].fits else 0, "samples", "higher")


def grid_truth(try_batch: Callable[..., object], found: int) -> int:
    """Every point of a 2% grid from 90% to 106% of the found size: the largest that fits."""
    grid = sorted({round(found * (0.90 + 0.02 * k)) for k in range(9)})
    fits = {batch: try_batch(batch, "grid").fits for batch in grid}  # type: ignore[attr-defined]
    return max((batch for batch, ok in fits.items() if ok), default=0)
