"""A user's own suite, as a user writes it: their environment's collection as parametrized benchmarks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymbench import load_record

EXAMPLES = Path(__file__).resolve().parents[2] / "gymbench" / "data" / "example_tasks.jsonl"
FAST_SIM = {"step_base_s": 0.004, "step_per_seq_s": 0, "output_tokens_mean": 8}

USER_SUITE = f"""
import pytest

TASKS = {str(EXAMPLES)!r}


@pytest.mark.parametrize("num_samples_in_parallel", [2, 8])
def test_collect_my_env(gymbench, num_samples_in_parallel):
    result = gymbench.collect(input_jsonl_fpath=TASKS, limit=16, num_samples_in_parallel=num_samples_in_parallel)
    assert result.completed == 16 and result.failed == 0
    assert len(list(result.rows())) == 16


@pytest.mark.asyncio
async def test_collect_awaited(gymbench, gymbench_sim):
    result = await gymbench.collect({{"input_jsonl_fpath": TASKS, "limit": 8, "num_samples_in_parallel": 4}})
    assert result.mean_reward is not None and 0 <= result.mean_reward <= 1
    assert gymbench_sim.capacity.saturation_concurrency == gymbench_sim.config.max_num_seqs
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """In a subprocess: pytester's in-process runs cannot import numpy a second time."""
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def pyproject(pytester: pytest.Pytester, **collect: object) -> None:
    sim = "\n".join(f"{key} = {json.dumps(value)}" for key, value in FAST_SIM.items())
    table = "\n".join(f"{key} = {json.dumps(value)}" for key, value in collect.items())
    pytester.makefile(".toml", pyproject=f"[tool.gymbench.sim]\n{sim}\n\n[tool.gymbench.collect]\n{table}\n")


def test_a_user_suite_records_standard_metrics_under_parametrized_ids(pytester: pytest.Pytester) -> None:
    pyproject(pytester)
    pytester.makepyfile(test_env=USER_SUITE)
    results = pytester.path / "results"
    outcome = run(pytester, "--gymbench-save", "first", "--gymbench-results-dir", str(results), "--gymbench-quick")
    outcome.assert_outcomes(passed=3)
    record = load_record(next(Path(results).glob("*/*_first.json")))
    ids = {bench.id for bench in record.benchmarks}
    assert {"test_env.py::test_collect_my_env[num_samples_in_parallel=2]",
            "test_env.py::test_collect_my_env[num_samples_in_parallel=8]",
            "test_env.py::test_collect_awaited"} == ids  # fmt: skip
    metrics = record.benchmark("test_env.py::test_collect_my_env[num_samples_in_parallel=8]").metrics
    for name, unit, direction in [
        ("rollouts_per_s", "rollouts/s", "higher"), ("output_tokens_per_s", "tokens/s", "higher"),
        ("latency_p50", "s", "lower"), ("latency_p99", "s", "lower"), ("stage_slot_wait", "s", "lower"),
        ("stage_connection_wait", "s", "lower"), ("stage_generation", "s", "lower"),
        ("stage_verification", "s", "lower"), ("mean_reward", "reward", "higher"), ("error_rate", "ratio", "lower"),
        ("client_cpu_per_rollout", "s", "lower"),
    ]:  # fmt: skip
        assert (metrics[name].unit, metrics[name].direction) == (unit, direction), name
    assert metrics["error_rate"].value == 0.0 and metrics["rollouts_per_s"].value > 0

    gated = run(pytester, "--gymbench-compare", "first", "--gymbench-results-dir", str(results), "--gymbench-quick",
                "--gymbench-fail-on", "regression")  # fmt: skip
    gated.assert_outcomes(passed=3)
    assert "gymbench comparison" in gated.stdout.str()
    assert gated.ret in (0, 6)  # quick figures: the gate ran; whether it flags is the figures' business


def test_the_options_select_the_server_and_a_bad_setting_fails_with_the_clis_message(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pyproject(pytester, api_key_env="MY_TEST_KEY")
    pytester.makepyfile(
        test_env=f"""
TASKS = {str(EXAMPLES)!r}

def test_unreachable(gymbench):
    gymbench.collect(input_jsonl_fpath=TASKS, limit=2)

def test_bad_setting(gymbench):
    gymbench.collect(input_jsonl_fpath=TASKS, num_samples_in_paralel=4)
"""
    )
    monkeypatch.setenv("MY_TEST_KEY", "sk-secret-from-the-environment-123")
    outcome = run(pytester, "--gymbench-backend", "openai", "--gymbench-base-url", "http://127.0.0.1:1/v1",
                  "--gymbench-model", "m", "--gymbench-save", "s", "--gymbench-results-dir",
                  str(pytester.path / "results"))  # fmt: skip
    outcome.assert_outcomes(failed=2)
    text = outcome.stdout.str()
    assert "gymbench: error: cannot reach the model server at http://127.0.0.1:1/v1/models after 3 tries" in text
    assert "gymbench: error: gymbench.collect: unknown setting 'num_samples_in_paralel'" in text
    assert "Traceback" not in text and "sk-secret-from-the-environment-123" not in text


def test_secrets_never_reach_the_record(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pyproject(pytester, api_key_env="MY_TEST_KEY")
    pytester.makepyfile(
        test_env=f"""
def test_collect(gymbench):
    gymbench.collect(input_jsonl_fpath={str(EXAMPLES)!r}, limit=4)
"""
    )
    secret = "sk-do-not-store-this-key-98765"
    monkeypatch.setenv("MY_TEST_KEY", secret)
    results = pytester.path / "results"
    outcome = run(pytester, "--gymbench-save", "s", "--gymbench-results-dir", str(results))
    outcome.assert_outcomes(passed=1)
    for path in Path(results).rglob("*.json"):
        assert secret not in path.read_text()


TUNE_SUITE = f"""
import pytest

TASKS = {str(EXAMPLES)!r}


def test_knee(gymbench, gymbench_sim):
    outcome = gymbench.tune(input_jsonl_fpath=TASKS, start=2, max_parallelism=32, precision=0.1, min_batches=2,
                            max_batches=4, sample_size=32)
    assert 1 <= outcome.recommended <= 32 and outcome.expected_rollouts_per_s > 0
    assert gymbench.metrics["knee_parallelism"].unit == "parallelism"


@pytest.mark.asyncio
async def test_tune_in_an_async_test(gymbench):
    gymbench.tune(input_jsonl_fpath=TASKS)


def test_bad_tune_setting(gymbench):
    gymbench.tune(input_jsonl_fpath=TASKS, max_paralelism=8)


def test_open_loop_tune(gymbench):
    gymbench.tune(input_jsonl_fpath=TASKS, strategy="poisson", strategy_options={{"request_rate": 5}})
"""


def test_tune_records_the_knee_and_says_what_is_wrong_in_one_line(pytester: pytest.Pytester) -> None:
    pyproject(pytester)
    pytester.makepyfile(test_tune=TUNE_SUITE)
    results = pytester.path / "results"
    outcome = run(pytester, "--gymbench-save", "t", "--gymbench-results-dir", str(results))
    outcome.assert_outcomes(passed=1, failed=3)
    text = outcome.stdout.str()
    assert "gymbench: error: gymbench.tune(...) runs its own event loop; call it from a plain test" in text
    assert "gymbench: error: gymbench.tune: unknown setting 'max_paralelism'" in text
    assert "gymbench: error: strategy 'poisson' is open-loop (it sends requests on a schedule" in text
    assert "Traceback" not in text and "GymbenchError" not in text
    record = load_record(next(Path(results).glob("*/*_t.json")))
    metrics = record.benchmark("test_tune.py::test_knee").metrics
    for name in ("knee_parallelism", "recommended_parallelism", "plateau_rollouts_per_s", "expected_rollouts_per_s"):
        assert metrics[name].value > 0, name
