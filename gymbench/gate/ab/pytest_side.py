"""``pytest benches/ --gymbench-ab BASE_REF``: the A/B gate from inside a pytest session.

The session collects as usual (so ``-k``, markers and paths select as always), then hands the
selected benchmarks to the A/B runner instead of running them itself: this working tree is the
candidate, ``BASE_REF`` the baseline. The verdict becomes the exit status as with
``--gymbench-compare`` (6 regression, 7 inconclusive, 4 error).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gymbench.errors import GymbenchError
from gymbench.fingerprint import machine_info
from gymbench.gate.ab.gate import ab_gate
from gymbench.gate.ab.settings import ABSettings
from gymbench.gate.gate import GateResult, noise_for
from gymbench.gate.settings import compare_settings
from gymbench.gate.store import AB_CALIBRATION_DIR
from gymbench.settings import build_settings


def run_ab_session(session: pytest.Session, base_ref: str, repeats: int | None) -> GateResult:
    config = session.config
    nodeids = {item.nodeid for item in session.items if "gymbench" in getattr(item, "fixturenames", ())}
    if not nodeids:
        raise GymbenchError("--gymbench-ab: no selected test uses the gymbench fixture, nothing to compare")
    files = sorted({nodeid.split("::", 1)[0] for nodeid in nodeids})
    settings = build_settings(ABSettings, (), {"repeats": repeats} if repeats else {}, where="--gymbench-ab")
    results_dir = Path(config.getoption("--gymbench-results-dir") or config.rootpath / "results")
    calibration = config.getoption("--gymbench-calibration")
    noise = noise_for(results_dir, machine_info()["key"], calibration, AB_CALIBRATION_DIR)
    compare = compare_settings(config.rootpath / "pyproject.toml", min_effect=config.getoption("--gymbench-min-effect"))
    fail_on = config.getoption("--gymbench-fail-on")
    return ab_gate(config.rootpath, base_ref, None, files, settings, compare, noise, fail_on, only=nodeids)
