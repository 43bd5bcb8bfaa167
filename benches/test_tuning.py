"""The tuner against simulator presets whose saturation point is known exactly.

For each preset, the doubling sweep and the adaptive search each report their knee; both should
land within ±10% of the preset's saturation concurrency (``gymbench sim-server --describe``), and
the adaptive search should take at most half the sweep's wall time. Quick mode uses one small,
fast engine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gymbench import Recorder
from gymbench.settings import build_settings
from gymbench.sim import config_from_preset, describe
from gymbench.testing import make_plugins
from gymbench.tune.command import tune_run
from gymbench.tune.config import TuneConfig

TASKS = Path(__file__).resolve().parents[1] / "gymbench" / "data" / "example_tasks.jsonl"
QUICK_ENGINE = {"max_num_seqs": 16, "step_base_s": 0.01, "step_per_seq_s": 0.0005, "output_tokens_mean": 24}
PRESETS = {"vllm-like": 8, "small-slow": 1}
"""Preset → the sweep's first parallelism (the seeds start at 5 or 8; a 4-sequence engine at 1)."""


def run(method: str, preset: str | None, start: int, overrides: dict) -> tuple[float, float]:
    settings = [f"input_jsonl_fpath={TASKS}", "save_results=false", "plot=", "progress=false"]
    settings += [f"method={method}", f"start={start}"]
    settings += [f"sim_preset={preset}"] if preset else []
    settings += [f"sim.{key}={value}" for key, value in overrides.items()]
    result = tune_run(build_settings(TuneConfig, settings), make_plugins())
    return result.knee.parallelism, result.wall_s


@pytest.mark.parametrize("preset", ["quick-engine", *PRESETS])
def test_sweep_versus_adaptive(gymbench: Recorder, preset: str) -> None:
    quick_case = preset == "quick-engine"
    if gymbench.quick != quick_case:
        pytest.skip("quick mode runs the small engine only; a full run runs the presets")
    overrides = QUICK_ENGINE if quick_case else {}
    saturation = describe(config_from_preset(None if quick_case else preset, overrides)).saturation_concurrency
    start = 2 if quick_case else PRESETS[preset]
    sweep_knee, sweep_wall = run("sweep", None if quick_case else preset, start, overrides)
    adaptive_knee, adaptive_wall = run("adaptive", None if quick_case else preset, start, overrides)
    gymbench.record("saturation_concurrency", saturation, "parallelism", "higher")
    gymbench.record("sweep_knee", sweep_knee, "parallelism", "higher")
    gymbench.record("adaptive_knee", adaptive_knee, "parallelism", "higher")
    gymbench.record("sweep_knee_error", sweep_knee / saturation - 1, "ratio", "lower")
    gymbench.record("adaptive_knee_error", adaptive_knee / saturation - 1, "ratio", "lower")
    gymbench.record("sweep_wall", sweep_wall, "s", "lower")
    gymbench.record("adaptive_wall", adaptive_wall, "s", "lower")
    gymbench.record("adaptive_over_sweep_wall", adaptive_wall / sweep_wall, "ratio", "lower")
