"""Metric labels: the table's entries and the rule for names outside it."""

from __future__ import annotations

from gymbench.labels import label


def test_label_uses_the_table_then_the_precision_prefix() -> None:
    assert label("stage_backend_other") == "other backend time per rollout"
    assert label("bf16_ckpt_phase_policy_training") == "bf16 checkpointed: policy training phase"


def test_label_of_an_unknown_name_is_words_with_acronyms_and_rates() -> None:
    assert label("server_cpu_utilisation") == "server CPU utilisation"
    assert label("packed_tokens_per_s_vs_padded") == "packed tokens/s vs padded"
    assert label("ttft_p99") == "TTFT p99"
    assert label("") == ""


def test_a_bracketed_name_keeps_the_server_as_written_after_its_metrics_label() -> None:
    assert label("cpu_ms_per_rollout[example_single_tool_call]") == "CPU per rollout, example_single_tool_call"
    assert label("latency_p50[http://127.0.0.1:8001/v1]") == "latency p50, http://127.0.0.1:8001/v1"
