"""The calibrated simulator against the real engine it was calibrated from (issue 23, item 5).

For each llama.cpp configuration (slot-bound: ``-np`` below the compute knee; compute-bound: many
slots, the step's per-sequence cost the limit) the bench starts ``llama-server`` (one compute
thread), calibrates a profile from it (``gymbench calibrate-sim``), then measures the truth: a
closed loop of ``p`` clients at each ``p`` of the grid, requests finishing in a window after a
warm-up (:func:`gymbench.sim.loadgen.closed_loop`). The calibrated simulator runs the same
closed loop in simulated time. Recorded per ``p``: the truth's and the simulator's requests/s and
the error; then each curve's knee (the smallest ``p`` with at least 97% of its plateau) and the
knee error. Targets: every per-``p`` error within ±10%, the knee within ±10%.

The window is 30 s per point (the issue's); ``GYMBENCH_TRUTH_WINDOW_S`` shortens it and
``GYMBENCH_TRUTH_P=1,4,16`` takes a subset of the grid. Quick mode: 3 s windows at three points.
Skipped, with the reason, when no ``llama-server`` binary or GGUF model is at hand
(``GYMBENCH_LLAMA_SERVER``, ``GYMBENCH_LLAMA_MODEL``).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from gymbench import Recorder
from gymbench.sim.calibrate import workload_body
from gymbench.sim.calibrate_command import CalibrateSettings, calibrate
from gymbench.sim.config import config_from_preset
from gymbench.sim.loadgen import closed_loop
from gymbench.sim.text import count_tokens
from gymbench.sim.virtual_load import simulated_closed_loop
from tests.sim.real_llama import running_llama_server

pytestmark = pytest.mark.real_engine

GRID = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64)
CONFIGS = {"slot-bound": 4, "compute-bound": 64}
"""Configuration → llama-server's ``-np``."""
PROMPT_WORDS, MAX_TOKENS = 24, 64
KNEE_SHARE = 0.97


def knee(curve: dict[int, float]) -> int:
    """The smallest ``p`` reaching ``KNEE_SHARE`` of the curve's plateau (its highest point)."""
    plateau = max(curve.values())
    return min(p for p, value in curve.items() if value >= KNEE_SHARE * plateau)


def grid(quick: bool, slots: int) -> list[int]:
    chosen = os.environ.get("GYMBENCH_TRUTH_P")
    if chosen:
        return sorted({int(p) for p in chosen.split(",")})
    return sorted({1, slots, 2 * slots}) if quick else list(GRID)


def truth(url: str, model: str, p: int, window_s: float) -> float:
    body = workload_body(model, PROMPT_WORDS, MAX_TOKENS)
    result = asyncio.run(closed_loop(url, p, window_s, warmup_s=2.0, body=body))
    assert result.completed > 0, f"no request finished at p={p} ({result.errors} failed)"
    return result.requests_per_s


def load_average() -> float:
    return os.getloadavg()[0]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_calibrated_simulator_tracks_the_engine(gymbench: Recorder, name: str, tmp_path: Path) -> None:
    slots = CONFIGS[name]
    window_s = float(os.environ.get("GYMBENCH_TRUTH_WINDOW_S", 3 if gymbench.quick else 30))
    gymbench.record("load_before", load_average(), "load", "lower")
    with running_llama_server(slots=slots, context=512 * slots) as url:
        profile = tmp_path / f"{name}.yaml"
        settings = CalibrateSettings(base_url=url, output=str(profile), prompt_words=PROMPT_WORDS,
                                     max_tokens=MAX_TOKENS, window_s=min(window_s, 8.0), progress=False)  # fmt: skip
        assert calibrate(settings) == 0  # unstreamed, as the truth's requests are
        config = config_from_preset(None, {}, str(profile))
        points = grid(gymbench.quick, slots)
        measured = {p: truth(url, config.model, p, window_s) for p in points}
    sim_prompt = count_tokens(workload_body(config.model, PROMPT_WORDS, MAX_TOKENS)["messages"][0]["content"])
    simulated = {
        p: simulated_closed_loop(config, p, prompt_tokens=sim_prompt, output_tokens=MAX_TOKENS).requests_per_s
        for p in points
    }
    gymbench.record("load_after", load_average(), "load", "lower")
    print(f"\n{name} (-np {slots}, -t 1), {window_s:g} s per point")
    print(f"{'p':>4} {'engine req/s':>13} {'simulated':>10} {'error':>8}")
    errors = {}
    for p in points:
        errors[p] = simulated[p] / measured[p] - 1
        print(f"{p:>4} {measured[p]:>13.3f} {simulated[p]:>10.3f} {100 * errors[p]:>+7.1f}%")
        gymbench.record(f"truth_rps_p{p}", measured[p], "requests/s", "higher")
        gymbench.record(f"sim_rps_p{p}", simulated[p], "requests/s", "higher")
        gymbench.record(f"error_p{p}", errors[p], "ratio", "lower")
    true_knee, sim_knee = knee(measured), knee(simulated)
    print(f"knee: engine {true_knee}, simulator {sim_knee} ({100 * (sim_knee / true_knee - 1):+.0f}%)")
    gymbench.record("max_abs_error", max(abs(e) for e in errors.values()), "ratio", "lower")
    gymbench.record("truth_knee", true_knee, "parallelism", "higher")
    gymbench.record("sim_knee", sim_knee, "parallelism", "higher")
    gymbench.record("knee_error", sim_knee / true_knee - 1, "ratio", "lower")
