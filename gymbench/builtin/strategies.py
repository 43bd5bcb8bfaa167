"""The built-in concurrency strategies' plugin: ``semaphore`` (closed-loop), and the open-loop
arrivals ``constant``, ``poisson``, ``gamma`` and ``trace`` (:mod:`gymbench.builtin.arrivals`).

Registration only: the strategies and their settings (:mod:`gymbench.builtin.strategy_settings`)
are imported when a run uses them. The ``adaptive`` strategy is tune's, registered by
:mod:`gymbench.tune.plugin` through the same hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gymbench.hookspecs import hookimpl
from gymbench.types import Component, ConcurrencyStrategy

if TYPE_CHECKING:
    from gymbench.builtin.strategy_settings import (
        GammaSettings,
        RateSettings,
        SemaphoreSettings,
        TraceSettings,
    )

SETTINGS = "gymbench.builtin.strategy_settings"


def make_semaphore(settings: SemaphoreSettings) -> ConcurrencyStrategy:
    from gymbench.builtin.semaphore import SemaphoreStrategy

    return SemaphoreStrategy(settings.num_samples_in_parallel)


def make_constant(settings: RateSettings) -> ConcurrencyStrategy:
    from gymbench.builtin.arrivals import ArrivalStrategy, constant_gaps

    rate = settings.request_rate
    return ArrivalStrategy(constant_gaps(rate), "constant", rate, settings)


def make_poisson(settings: RateSettings) -> ConcurrencyStrategy:
    from gymbench.builtin.arrivals import ArrivalStrategy, gamma_gaps

    rate = settings.request_rate
    gaps = gamma_gaps(rate, 1.0, settings.arrival_seed)
    return ArrivalStrategy(gaps, "poisson", rate, settings)


def make_gamma(settings: GammaSettings) -> ConcurrencyStrategy:
    from gymbench.builtin.arrivals import ArrivalStrategy, gamma_gaps

    rate = settings.request_rate
    gaps = gamma_gaps(rate, settings.gamma_shape, settings.arrival_seed)
    return ArrivalStrategy(gaps, f"gamma (shape {settings.gamma_shape:g})", rate, settings)


def make_trace(settings: TraceSettings) -> ConcurrencyStrategy:
    from pathlib import Path

    from gymbench.builtin.arrivals import ArrivalStrategy, read_trace, trace_gaps

    times = read_trace(Path(settings.trace_file), settings.trace_time_scale)
    target = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else None
    return ArrivalStrategy(trace_gaps(times), "trace", target, settings)


@hookimpl
def gymbench_register_strategies() -> list[Component]:
    return [
        Component(
            "semaphore",
            make_semaphore,
            "at most num_samples_in_parallel rollouts at once (unset: unbounded, as NeMo Gym)",
            settings=f"{SETTINGS}:SemaphoreSettings",
        ),
        Component(
            "constant",
            make_constant,
            "open loop: one request every 1/request_rate seconds, whether or not earlier ones answered",
            settings=f"{SETTINGS}:RateSettings",
        ),
        Component(
            "poisson",
            make_poisson,
            "open loop: Poisson arrivals at request_rate (exponential gaps, seeded by arrival_seed)",
            settings=f"{SETTINGS}:RateSettings",
        ),
        Component(
            "gamma",
            make_gamma,
            "open loop: gamma-distributed gaps of mean 1/request_rate (gamma_shape: below 1 bursty, 1 Poisson)",
            settings=f"{SETTINGS}:GammaSettings",
        ),
        Component(
            "trace",
            make_trace,
            "open loop: replay the arrival times in trace_file (a fixed schedule)",
            settings=f"{SETTINGS}:TraceSettings",
        ),
    ]
