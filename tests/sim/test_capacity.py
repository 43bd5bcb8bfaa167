from __future__ import annotations

import pytest

from gymbench import GymbenchError
from gymbench.sim import SimConfig, config_from_preset, describe
from gymbench.sim.capacity import step_time


def test_formula_for_the_default_engine() -> None:
    config = SimConfig()  # a=20 ms, b=0.5 ms, c=10 µs, 64 seqs, 32 output tokens
    capacity = describe(config, prompt_tokens=32)
    step = 0.02 + 64 * (0.0005 + 0.00001 * 32 / 32)
    assert capacity.step_time_at_saturation_s == pytest.approx(step)
    assert capacity.max_requests_per_s == pytest.approx(64 / (32 * step))
    assert capacity.max_output_tokens_per_s == pytest.approx(64 / step)
    assert capacity.saturation_concurrency == 64 and capacity.limited_by == "max_num_seqs"


def test_throughput_below_saturation_and_flat_above() -> None:
    config = SimConfig()
    capacity = describe(config)
    at_8 = capacity.throughput_at(config, 8)
    assert at_8 == pytest.approx(8 / (32.5 * step_time(config, 8, 32, 32)))
    assert capacity.throughput_at(config, 128) == capacity.max_requests_per_s
    assert capacity.throughput_at(config, 16) < capacity.throughput_at(config, 32)


def test_kv_cache_lowers_the_saturation_point() -> None:
    capacity = describe(SimConfig(kv_cache_tokens=640), prompt_tokens=32)
    assert capacity.saturation_concurrency == 10 and capacity.limited_by == "kv_cache_tokens"


def test_rate_limits_cap_a_hosted_api() -> None:
    config = config_from_preset("hosted-api")
    capacity = describe(config, prompt_tokens=32, max_tokens=64)
    assert capacity.limited_by == "rpm_limit" and capacity.max_requests_per_s == pytest.approx(10.0)
    assert capacity.saturation_concurrency < config.max_num_seqs
    tight = describe(config.replace(tpm_limit=9600), prompt_tokens=32, max_tokens=64)
    assert tight.limited_by == "tpm_limit" and tight.max_requests_per_s == pytest.approx(9600 / 60 / 96)


def test_prefill_budget_can_be_the_limit() -> None:
    config = SimConfig(max_num_batched_tokens=64, prefill_per_token_s=0.0)
    capacity = describe(config, prompt_tokens=512)
    assert capacity.limited_by == "max_num_batched_tokens"


def test_every_preset_is_valid_and_describable() -> None:
    from gymbench.sim.config import PRESETS

    for name in PRESETS:
        assert describe(config_from_preset(name)).max_requests_per_s > 0


@pytest.mark.parametrize(
    "overrides",
    [{"max_num_seqs": 0}, {"error_rate": 1.5}, {"output_tokens_dist": "zipf"}, {"step_base_s": -1}],
)
def test_invalid_settings_are_clear_errors(overrides: dict) -> None:
    with pytest.raises(GymbenchError, match="invalid simulator configuration"):
        config_from_preset(None, overrides)


def test_unknown_setting_and_preset() -> None:
    with pytest.raises(GymbenchError, match="unknown simulator setting 'max_seqs'"):
        config_from_preset(None, {"max_seqs": 3})
    with pytest.raises(GymbenchError, match="known presets: vllm-like"):
        config_from_preset("tgi", {})


def test_describe_reports_the_step_at_the_saturation_it_reports() -> None:
    """A rate-limited API saturates at one client: the step there is a + b, not a + 1024·b."""
    config = config_from_preset("hosted-api")
    capacity = describe(config)
    assert capacity.saturation_concurrency == 1
    assert capacity.step_time_at_saturation_s == pytest.approx(step_time(config, 1, 32, 32))
    assert capacity.step_time_at_saturation_s == pytest.approx(0.02001)
    assert capacity.latency_at_saturation_s == pytest.approx(32 * 0.02001)


@pytest.mark.parametrize(("dist", "engine_rate"), [("uniform", 33.94), ("exponential", 29.35)])
def test_kv_bound_formula_with_varied_lengths(dist: str, engine_rate: float) -> None:
    """A long request holds its KV reservation longer, so running sequences are length-biased.
    ``engine_rate``: the engine's own long-run requests/s (40,000 closed-loop completions in
    simulated time, 23-token prompts). The fixed-length formula read 36.7 for both."""
    config = SimConfig(max_num_seqs=512, kv_cache_tokens=3200, output_tokens_dist=dist)
    capacity = describe(config, prompt_tokens=23)
    assert capacity.limited_by == "kv_cache_tokens"
    assert capacity.max_requests_per_s == pytest.approx(engine_rate, rel=0.02)
    fixed = describe(SimConfig(max_num_seqs=512, kv_cache_tokens=3200), prompt_tokens=23)
    assert fixed.max_requests_per_s == pytest.approx(36.68, rel=0.005)


def test_exact_mean_output_length() -> None:
    from gymbench.sim.capacity import mean_output_tokens

    assert mean_output_tokens(SimConfig(output_tokens_dist="uniform", output_tokens_mean=32), None) == 32.0
    exponential = mean_output_tokens(SimConfig(output_tokens_dist="exponential", output_tokens_mean=32), None)
    assert exponential == pytest.approx(32.014, abs=0.001)  # max(1, round(X)): a little above the mean
    capped = mean_output_tokens(SimConfig(output_tokens_dist="exponential", output_tokens_mean=32), 16)
    assert capped < 16


def test_sim_server_help_lists_every_preset() -> None:
    """A preset's help has a % in it ("5% server errors"): argparse must not read it as a format."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "gymbench.cli", "sim-server", "--help"], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # argparse wraps the help
    assert "5% server errors" in text and "hosted-api" in text


def test_describe_command_prints_the_step_at_saturation() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "gymbench.cli", "sim-server", "--preset", "hosted-api", "--describe"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "saturates at concurrency 1; step there 20.01 ms" in done.stdout


def test_non_finite_numbers_are_refused_however_the_configuration_is_made() -> None:
    with pytest.raises(GymbenchError, match="step_base_s must be a finite number, got nan"):
        SimConfig(step_base_s=float("nan"))
    with pytest.raises(GymbenchError, match="setting 'rpm_limit': got inf"):
        config_from_preset(None, {"rpm_limit": float("inf")})
