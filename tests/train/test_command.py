"""``gymbench train`` end to end, and the models hook as a third-party plugin sees it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gymbench import Component, Recorder, hookimpl, load_record
from gymbench.cli import main
from gymbench.settings import build_settings
from gymbench.testing import make_plugins
from gymbench.train import precision
from gymbench.train.execute import train
from gymbench.train.models import DeepMLP, MLPConfig
from gymbench.train.settings import TrainSettings

TINY = ["--model", "transformer", "--size", "tiny", "--seq-len", "16", "--batch", "4", "--no-progress"]


def test_train_prints_a_summary_and_saves_a_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "train",
        *TINY,
        "--steps",
        "3",
        "--warmup",
        "1",
        "--accumulation",
        "2",
        "--checkpointing",
        "every-2",
    ]
    assert main([*argv, "--save", "t1", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "step time    median" in out and "[process RSS]" in out and "MFU n/a" in out
    [saved] = tmp_path.glob("*/*_t1.json")
    record = load_record(saved)
    assert record.kind == "train"
    [bench] = record.benchmarks
    assert bench.params["accumulation"] == 2 and bench.params["checkpointing"] == "every-2"
    assert len(bench.metrics["step_time"].samples) == 3
    for metric in ("tokens_per_s", "phase_backward", "peak_memory", "model_flops_per_step"):
        assert bench.metrics[metric].value > 0
    assert bench.metrics["activation_memory"].value >= 0  # a few KiB at this size: pages may be reused
    assert bench.extra["memory"]["label"] == "process RSS"
    assert bench.extra["gpu"]["available"] in (True, False) and bench.extra["gpu"]["reason"]


FP16 = ["train", "--model", "mlp", "--precision", "fp16", "--batch", "64", "--steps", "2", "--warmup", "0"]


def test_fp16_on_a_cpu_without_native_fp16_warns_and_keeps_shapes_tiny(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx2", "avx512_bf16"})
    assert main([*FP16, "--no-memory", "--no-progress", "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    assert "fp16 on this CPU (no avx512_fp16 or amx_fp16)" in captured.err
    assert "size=tiny, batch=4" in captured.err
    assert "loss scale" in captured.out and "has neither avx512_fp16 nor amx_fp16" in captured.out


def test_fp16_on_a_cpu_with_native_fp16_keeps_the_shapes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx512_fp16"})
    argv = [*FP16, "--size", "tiny", "--batch", "8", "--no-memory", "--no-progress", "--device", "cpu"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err and "batch 8 = 1 x 8" in captured.out
    assert "this CPU has avx512_fp16, so fp16 runs native kernels here" in captured.out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--batch", "6", "--accumulation", "4"], "not divisible by accumulation 4"),
        (["--model", "nope"], "unknown model 'nope'; known models: "),  # hf-causal-lm too with transformers
        (["--checkpointing", "half"], "use 'off', 'on' or 'every-K'"),
        (["+model_options=layers"], "setting 'model_options'"),
        (["+model_options.layers=many"], "invalid literal for int"),
        (["--save", "../escape"], "becomes a file name"),
        (["--find-batch", "search", "--memory-budget-mib", "0"], "setting 'memory_budget_mib': got 0.0"),
        (["--find-batch", "search", "--tolerance", "2"], "0 < tolerance < 1"),
        (["--step", "rl", "--model", "mlp"], "model 'mlp' has no `token_logprobs`, which the RL step needs"),
        (["--step", "rl", "--batch", "6"], "not a whole number of GRPO groups of 4"),
        (["--rollouts", "no-such-file.jsonl"], "no-such-file.jsonl: cannot read the rollouts file"),
        (["--lengths", "normal"], "setting 'lengths': got 'normal'"),
        (["--trial-allocator", "jemalloc"], "setting 'trial_allocator': got 'jemalloc'"),
    ],
)
def test_bad_input_is_one_line_without_traceback(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["train", *TINY, "--steps", "1", "--no-memory", "--results-dir", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # refused before a run started


def test_the_rl_step_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rollouts = tmp_path / "rollouts.jsonl"
    rows = [{"reward": i % 2, "usage": {"prompt_tokens": 6, "completion_tokens": 3 + 5 * i}} for i in range(8)]
    rollouts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    argv = ["train", *TINY, "--step", "rl", "--rollouts", str(rollouts), "--packing", "--seq-len", "64"]
    argv += ["+model_options.layers=4", "--checkpoint-ratio", "0.3", "--steps", "2", "--warmup", "1"]
    assert main([*argv, "--no-memory", "--save", "rl", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "rl step" in out and "8 rollouts from" in out and "packed into rows" in out
    assert "1 of 4 blocks checkpointed" in out and "policy_and_reference_logprobs" in out
    assert "FLOP/s of model FLOPs" in out and "square-root LR rule" not in out
    [bench] = load_record(next(tmp_path.glob("*/*_rl.json"))).benchmarks
    assert bench.params["step"] == "rl" and bench.params["packing"] is True
    assert bench.params["checkpointing"] == "ratio-0.3" and "work=" in bench.id and "seq_len=64" in bench.id
    assert bench.extra["work"]["model_config"]["layers"] == 4 and bench.extra["work"]["checkpoint_ratio"] == 0.3
    for phase in ("policy_and_reference_logprobs", "advantage_calculation", "policy_training", "optimizer"):
        assert bench.metrics[f"phase_{phase}"].value > 0
    assert 0 <= bench.metrics["padding_share"].value < 0.5
    assert any("1 of 4 blocks" in note for note in bench.extra["notes"])


def test_the_learning_rate_line_needs_base_batch(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "--model", "mlp", "--size", "tiny", "--batch", "400000", "--threads", "1"]
    argv += ["--find-batch", "halve", "--memory-budget-mib", "48", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "OOM" in out and "halving settled on" in out and "square-root LR rule" not in out
    assert main([*argv, "--base-batch", "64", "--lr", "1e-3"]) == 0
    assert "square-root LR rule: lr 0.001 at batch 64 ->" in capsys.readouterr().out


def test_the_python_api_returns_the_result_and_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    settings = build_settings(TrainSettings, ["size=tiny", "seq_len=16", "batch=4", "steps=2", "memory=false"])
    outcome = train(settings, make_plugins(), Recorder())
    assert capsys.readouterr().out == ""
    assert outcome.result.name == "train" and outcome.result.metrics["tokens_per_s"].value > 0
    assert any(line.startswith("step time") for line in outcome.lines)


def build_third_party(config: Mapping[str, Any]) -> DeepMLP:
    return DeepMLP(MLPConfig(width=8, depth=1, classes=2))


class ThirdParty:
    @hookimpl
    def gymbench_register_models(self) -> list[Component]:
        return [Component("my-mlp", build_third_party, "a third-party model")]


def test_a_plugin_registers_a_model_next_to_the_built_ins() -> None:
    plugins = make_plugins(ThirdParty())
    names = plugins.names("model")  # hf-causal-lm as well where transformers is installed
    assert {"mlp", "my-mlp", "transformer"} <= set(names) and names == sorted(names)
    assert plugins.components["model"]["mlp"].plugin == "gymbench.train.plugin"
    assert isinstance(plugins.create("model", "my-mlp"), DeepMLP)
    assert "train" in plugins.commands


def test_starting_the_cli_does_not_import_torch() -> None:
    code = (
        "import sys; from gymbench.plugins import Plugins; p = Plugins(); "
        "from gymbench.cli import build_parser; build_parser(p); print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("how", ["--checkpointing on", "+checkpointing=on", "yaml"])
def test_checkpointing_on_is_read_from_every_source(how: str, tmp_path: Path) -> None:
    """``on``/``off`` are YAML 1.1 booleans; a str setting keeps them as typed everywhere."""
    argv = ["train", "--model", "mlp", "--size", "tiny", "--batch", "4", "--steps", "1", "--warmup", "0"]
    argv += ["--no-memory", "--no-flops", "--no-progress", "--save", "ck", "--results-dir", str(tmp_path)]
    if how == "yaml":
        config = tmp_path / "train.yaml"
        config.write_text("checkpointing: on\n")
        argv += ["--config", str(config)]
    else:
        argv += how.split()
    assert main(argv) == 0
    [bench] = load_record(next(tmp_path.glob("*/*_ck.json"))).benchmarks
    assert bench.params["checkpointing"] == "on"


def record_id(*dotlist: str) -> str:
    from gymbench.record import benchmark_id
    from gymbench.train.execute import build_config
    from gymbench.train.identity import record_params, work_definition

    settings = build_settings(TrainSettings, ["size=tiny", *dotlist])
    config = build_config(settings)
    return benchmark_id("train", record_params(settings, config, work_definition(settings, config, "cpu")))


def test_a_checkpoint_ratio_is_named_in_the_record_id_not_called_off() -> None:
    assert "checkpointing=ratio-0.3," in record_id("checkpoint_ratio=0.3")
    assert "checkpointing=off," in record_id()


@pytest.mark.parametrize(
    "changed",
    [
        "checkpoint_ratio=0.3",
        "seq_len=64",
        "lengths=skewed",
        "model_options.layers=8",
        "precision=bf16",
        "batch=16",
        "accumulation=2",
        "packing=true",
        "threads=2",
        "group_size=2",
        "kl_penalty=0.1",
        "prompt_share=0.5",
    ],
)
def test_every_setting_that_changes_the_work_changes_the_record_id(changed: str) -> None:
    assert record_id(changed) != record_id()


@pytest.mark.parametrize("unchanged", ["steps=3", "warmup=0", "memory=false", "progress=false", "save=x", "lr=0.1"])
def test_what_only_changes_the_measuring_keeps_the_record_id(unchanged: str) -> None:
    assert record_id(unchanged) == record_id()


def test_search_settings_define_a_search_but_not_a_benchmark() -> None:
    assert record_id("margin=0.2") == record_id()
    assert record_id("find_batch=search", "margin=0.2") != record_id("find_batch=search")


BF16 = ["train", "--model", "mlp", "--size", "tiny", "--precision", "bf16", "--batch", "8", "--steps", "1"]


@pytest.mark.parametrize(
    ("flags", "warned"), [({"avx2", "avx512f"}, True), ({"avx512_bf16"}, False), ({"amx_bf16"}, False)]
)
def test_bf16_on_a_cpu_without_bf16_kernels_warns_like_fp16(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flags: set[str], warned: bool
) -> None:
    monkeypatch.setattr(precision, "cpu_flags", lambda: flags)
    argv = [*BF16, "--warmup", "0", "--no-memory", "--no-flops", "--no-progress", "--device", "cpu"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert ("bf16 on this CPU (no avx512_bf16 or amx_bf16)" in captured.err) is warned
    assert "batch 8 = 1 x 8" in captured.out  # bf16 keeps the shapes asked for
    assert ("has neither avx512_bf16 nor amx_bf16" in captured.out) is warned


def test_the_rl_output_and_record_say_which_grpo_ran(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["train", "--step", "rl", "--size", "tiny", "--batch", "8", "--seq-len", "32", "--lengths", "skewed"]
    argv += ["--grpo", "nemo-rl", "--updates-per-batch", "2", "--logprob-batch", "3", "--steps", "1", "--warmup", "0"]
    argv += ["--no-memory", "--no-flops", "--no-progress", "--device", "cpu", "--results-dir", str(tmp_path)]
    assert main([*argv, "--save", "rl"]) == 0
    out = capsys.readouterr().out
    assert "grpo         nemo-rl (leave-one-out baseline" in out
    assert "2 updates per batch of 16 rollouts; logprobs 3 samples per forward" in out
    (path,) = tmp_path.glob("*/*_rl.json")
    [bench] = load_record(path).benchmarks
    config = bench.extra["config"]
    assert (config["grpo"], config["updates_per_batch"], config["logprob_batch"]) == ("nemo-rl", 2, 3)
