"""FLOP counting, the GPU monitor and the profiler trace."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gymbench.train.config import TrainConfig
from gymbench.train.flops import FlopReport, count_flops, device_peak_flops, flop_rate_text
from gymbench.train.gpu_monitor import GpuMonitor
from gymbench.train.packing import StepCount
from gymbench.train.plugin import build_mlp, build_transformer
from gymbench.train.profiling import trace_one_step
from gymbench.train.session import TrainSession

MLP = TrainConfig(model="mlp", model_config={"size": "tiny", "width": 128}, batch=16, steps=2, warmup=0)
TRANSFORMER = TrainConfig(model="transformer", model_config={"size": "tiny"}, batch=2, seq_len=64)
SKEWED = replace(TRANSFORMER, batch=8, lengths="skewed", seq_len=128)


def counted(build: object, config: TrainConfig, **options: bool) -> tuple[FlopReport, StepCount]:
    """A FLOP count, and what one more step of the same session processed."""
    session = TrainSession(build, config)  # type: ignore[arg-type]
    report = count_flops(session, **options)
    session.step()
    return report, session.last_count


def test_mlp_flops_match_six_n_tokens() -> None:
    report, count = counted(build_mlp, MLP)
    assert report.rule == "6·N·tokens" and report.ratio_to_rule(count) == pytest.approx(1.0, abs=0.02)
    assert report.hardware == report.model


def test_checkpointing_recompute_counts_as_hardware_not_model_flops() -> None:
    plain, _ = counted(build_mlp, MLP)
    checkpointed, _ = counted(build_mlp, replace(MLP, checkpointing="on"))
    assert checkpointed.model == plain.model
    assert checkpointed.hardware.dense_per_slot > 1.1 * plain.hardware.dense_per_slot


def test_attention_model_flops_leave_out_the_kernels_recompute() -> None:
    with_attention, count = counted(build_transformer, TRANSFORMER, attention=True)
    without, _ = counted(build_transformer, TRANSFORMER, attention=False)
    layers, batch, heads, seq, head_dim = 2, 2, 2, 64, 16
    forward = 4 * batch * heads * seq * seq * head_dim  # QK^T and PV, 2 FLOPs per multiply-add
    model = with_attention.model_flops(count) - without.model_flops(count)
    hardware = with_attention.hardware_flops(count) - without.hardware_flops(count)
    assert model == layers * (forward + 2 * forward)  # the gradients need twice the forward's matmuls
    assert hardware == layers * (forward + 5 * forward // 2)  # torch's kernel also recomputes Q·K^T
    assert not without.attention_counted


def test_attention_model_flops_follow_palms_mfu_definition() -> None:
    """PaLM, appendix B: attention adds 12·L·H·Q·T FLOPs per token (H·Q = d_model), in full."""
    report, count = counted(build_transformer, TRANSFORMER)
    layers, d_model, seq = 2, 32, 64
    attention = report.model.attention_per_pair * count.real_pairs
    assert attention == 12 * layers * d_model * seq * count.tokens


def test_padding_and_recompute_are_hardware_flops_only() -> None:
    padded, count = counted(build_transformer, SKEWED)
    packed, _ = counted(build_transformer, replace(SKEWED, packing=True))
    assert count.padding_share > 0.3
    # rates from differently laid-out steps agree: model FLOPs depend on the real tokens only
    assert packed.model.dense_per_slot == padded.model.dense_per_slot
    assert packed.model.attention_per_pair == padded.model.attention_per_pair
    assert padded.hardware_flops(count) > padded.model_flops(count) / (1 - count.padding_share) * 0.99


def test_rl_step_counts_two_more_forward_passes() -> None:
    lm, lm_count = counted(build_transformer, replace(TRANSFORMER, batch=4))
    rl, rl_count = counted(build_transformer, replace(TRANSFORMER, batch=4, step="rl"))
    assert rl.rule == "10·N·tokens"
    assert rl.model.dense_per_slot / lm.model.dense_per_slot == pytest.approx(10 / 6, rel=0.01)
    assert rl.ratio_to_rule(rl_count) == pytest.approx(lm.ratio_to_rule(lm_count), rel=0.01)


@pytest.mark.parametrize(
    ("rate", "text"), [(2.5e12, "2.5 TFLOP/s"), (1.2e11, "0.12 TFLOP/s"), (3.1e9, "3.1 GFLOP/s"), (4e6, "4 MFLOP/s")]
)
def test_flop_rates_never_print_as_zero(rate: float, text: str) -> None:
    assert flop_rate_text(rate) == text


def test_mfu_needs_a_known_or_given_peak() -> None:
    session = TrainSession(build_mlp, MLP)
    assert device_peak_flops(session, None) == (
        None,
        "no known peak for a CPU; pass --peak-tflops to get MFU",
    )
    assert device_peak_flops(session, 2.0) == (2e12, "given")


def test_gpu_monitor_without_a_gpu_reports_why() -> None:
    with GpuMonitor() as monitor:
        pass
    if monitor.report.available:
        pytest.skip("this machine has a GPU")
    assert monitor.report.reason
    assert monitor.report.to_dict() == {"available": False, "reason": monitor.report.reason}
    assert monitor.report.text() == f"not sampled: {monitor.report.reason}"  # a sentence, not a dict


def test_gpu_monitor_line_reads_as_text() -> None:
    from gymbench.train.gpu_monitor import GpuReport

    report = GpuReport(True, "", [40.0, 60.0, 80.0], [1 << 30, 2 << 30, 3 << 30])
    assert report.text() == "utilisation median 60%, memory used max 3072 MiB (NVML, all processes; 3 samples)"


@pytest.mark.parametrize(
    ("build", "config"),
    [(build_mlp, replace(MLP, accumulation=2)), (build_transformer, replace(TRANSFORMER, step="rl", group_size=2))],
)
def test_profiler_trace_has_a_range_per_phase(tmp_path: Path, build: object, config: TrainConfig) -> None:
    session = TrainSession(build, config)  # type: ignore[arg-type]
    path, table = trace_one_step(session, tmp_path / "trace" / "step.json")
    names = [event.get("name") for event in json.loads(path.read_text())["traceEvents"]]
    assert "gymbench_train_step" in names and "gymbench_train_step" in table
    for phase in session.phases:
        assert phase in names
    if config.accumulation == 2:
        assert names.count("forward") == 2 and names.count("optimizer") == 1
