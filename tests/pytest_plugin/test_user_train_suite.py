"""A user's own training-step benchmarks: ``gymbench.train_step`` and ``gymbench.find_batch`` in pytest."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymbench import load_record

TRAIN_SUITE = """
import pytest

TINY = {"model": "transformer", "size": "tiny", "batch": 4, "seq_len": 16, "steps": 2, "warmup": 0, "memory": False}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("checkpointing", ["off", "on"])
def test_step(gymbench, precision, checkpointing):
    result = gymbench.train_step(TINY, precision=precision, checkpointing=checkpointing)
    assert result.step_time_s > 0 and result.tokens_per_s > 0
    assert result.params["precision"] == precision and result.params["checkpointing"] == checkpointing


def test_largest_batch(gymbench):
    result = gymbench.find_batch(model="mlp", size="tiny", memory_budget_mib=64, max_batch=256, verify_runs=0)
    assert 1 <= result.chosen_batch <= 256


def test_bad_setting(gymbench):
    gymbench.train_step(TINY, checkpointing="all")
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """In a subprocess: pytester's in-process runs cannot import torch a second time."""
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


@pytest.mark.slow
def test_train_step_benchmarks_record_parametrized_ids_and_gate(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_train=TRAIN_SUITE)
    results = str(pytester.path / "results")
    outcome = run(pytester, "--gymbench-save", "first", "--gymbench-results-dir", results)
    outcome.assert_outcomes(passed=5, failed=1)
    text = outcome.stdout.str()
    assert "gymbench: error: checkpointing 'all': use 'off', 'on' or 'every-K'" in text
    assert "Traceback" not in text and "During handling" not in text

    record = load_record(next(Path(results).glob("*/*_first.json")))
    by_id = {bench.id: bench for bench in record.benchmarks}
    cases = [(c, p) for c in ("off", "on") for p in ("fp32", "bf16")]
    ids = {f"test_train.py::test_step[checkpointing={c},precision={p}]" for c, p in cases}
    assert ids | {"test_train.py::test_largest_batch"} == set(by_id)
    step = by_id["test_train.py::test_step[checkpointing=on,precision=bf16]"].metrics
    for name, unit, direction in [("step_time", "s", "lower"), ("tokens_per_s", "tokens/s", "higher"),
                                  ("phase_backward", "s", "lower")]:  # fmt: skip
        assert (step[name].unit, step[name].direction) == (unit, direction), name
    assert len(step["step_time"].samples) == 2
    fit = by_id["test_train.py::test_largest_batch"].metrics
    assert fit["largest_fit"].direction == "higher" and 1 <= fit["chosen_batch"].value <= 256

    gated = run(pytester, "-k", "test_step and fp32", "--gymbench-compare", "first", "--gymbench-results-dir", results)
    gated.assert_outcomes(passed=2, deselected=4)
    assert "gymbench comparison" in gated.stdout.str()


CONFTEST_MODEL = """
from gymbench import Component, hookimpl
from gymbench.train.plugin import build_mlp


def build_my_model(config):
    return build_mlp({**config, "size": "tiny", "depth": 3})


@hookimpl
def gymbench_register_models():
    return [Component("my-model", build_my_model, "registered from conftest.py")]
"""

CONFTEST_SUITE = """
def test_my_model(gymbench):
    result = gymbench.train_step(model="my-model", batch=4, steps=1, warmup=0, memory=False)
    assert result.step_time_s > 0 and result.params["model"] == "my-model"
"""


def test_a_conftest_registers_a_model_without_a_package(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST_MODEL)
    pytester.makepyfile(test_mine=CONFTEST_SUITE)
    outcome = run(pytester)
    outcome.assert_outcomes(passed=1)
