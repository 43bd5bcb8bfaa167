"""``gymbench train`` end to end, and the models hook as a third-party plugin sees it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gymbench import Component, hookimpl, load_record
from gymbench.cli import main
from gymbench.testing import make_plugins
from gymbench.trainstep.models import DeepMLP, MLPConfig

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
    for metric in (
        "tokens_per_s",
        "phase_backward",
        "peak_memory",
        "activation_memory",
        "model_flops_per_step",
    ):
        assert bench.metrics[metric].value > 0
    assert bench.extra["memory"]["label"] == "process RSS"
    assert bench.extra["gpu"]["available"] in (True, False) and bench.extra["gpu"]["reason"]


def test_fp16_on_cpu_warns_and_keeps_shapes_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "train",
        "--model",
        "mlp",
        "--precision",
        "fp16",
        "--batch",
        "64",
        "--steps",
        "2",
        "--warmup",
        "0",
    ]
    assert main([*argv, "--no-memory", "--no-progress", "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    assert "fp16 on a CPU without native fp16 kernels" in captured.err
    assert "size=tiny, batch=4" in captured.err
    assert "loss scale" in captured.out and "says nothing about fp16 on a GPU" in captured.out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--batch", "6", "--accumulation", "4"], "not divisible by accumulation 4"),
        (["--model", "nope"], "unknown model 'nope'; known models: mlp, transformer"),
        (["--checkpointing", "half"], "use 'off', 'on' or 'every-K'"),
        (["+model_options=layers"], "setting 'model_options'"),
        (["+model_options.layers=many"], "invalid literal for int"),
        (["--save", "../escape"], "becomes a file name"),
        (["--find-batch", "search", "--memory-budget-mib", "0"], "setting 'memory_budget_mib': got 0.0"),
        (["--find-batch", "search", "--tolerance", "2"], "0 < tolerance < 1"),
    ],
)
def test_bad_input_is_one_line_without_traceback(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", *TINY, "--steps", "1", "--no-memory", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_find_batch_halve_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "--model", "mlp", "--size", "tiny", "--batch", "400000", "--threads", "1"]
    assert main([*argv, "--find-batch", "halve", "--memory-budget-mib", "48", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "OOM" in out and "halving settled on" in out and "square-root LR rule" in out


def build_third_party(config: Mapping[str, Any]) -> DeepMLP:
    return DeepMLP(MLPConfig(width=8, depth=1, classes=2))


class ThirdParty:
    @hookimpl
    def gymbench_register_models(self) -> list[Component]:
        return [Component("my-mlp", build_third_party, "a third-party model")]


def test_a_plugin_registers_a_model_next_to_the_built_ins() -> None:
    plugins = make_plugins(ThirdParty())
    assert plugins.names("model") == ["mlp", "my-mlp", "transformer"]
    assert plugins.components["model"]["mlp"].plugin == "gymbench.trainstep.plugin"
    assert isinstance(plugins.create("model", "my-mlp"), DeepMLP)
    assert "train" in plugins.commands


def test_starting_the_cli_does_not_import_torch() -> None:
    code = (
        "import sys; from gymbench.plugins import Plugins; p = Plugins(); "
        "from gymbench.cli import build_parser; build_parser(p); print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
