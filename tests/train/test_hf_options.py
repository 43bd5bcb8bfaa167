"""``+model_options.*`` of ``hf-causal-lm`` are checked against the model's own config class."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymbench import GymbenchError
from gymbench.cli import main

pytest.importorskip("transformers")

TINY_HF = ["--model", "hf-causal-lm", "--size", "tiny", "--batch", "2", "--seq-len", "8", "--steps", "1"]


def build(**options: object) -> object:
    from gymbench.train.hf import build_hf_causal_lm

    return build_hf_causal_lm({"size": "tiny", **options})


def test_values_take_the_type_of_the_configs_own_field() -> None:
    model = build(rms_norm_eps=1e-5, hidden_act="gelu", num_hidden_layers="3")
    config = model.inner.config  # type: ignore[attr-defined]
    assert config.rms_norm_eps == pytest.approx(1e-5) and isinstance(config.rms_norm_eps, float)
    assert config.hidden_act == "gelu" and config.num_hidden_layers == 3


def test_a_string_float_stays_a_float() -> None:
    assert build(rms_norm_eps="1e-5").inner.config.rms_norm_eps == pytest.approx(1e-5)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"hidden_sise": 128},
            r"\+model_options.hidden_sise: llama models have no option 'hidden_sise'; did you mean 'hidden_size'\?",
        ),
        ({"num_hidden_layers": 2.5}, r"got 2.5, expected int"),
        ({"hidden_act": "gleu"}, r"rejects \+model_options: unknown value 'gleu'"),
        ({"model_type": "no-such-type"}, r"unknown model_type 'no-such-type'"),
    ],
)
def test_bad_options_are_one_error_naming_the_option(options: dict, message: str) -> None:
    with pytest.raises(GymbenchError, match=message):
        build(**options)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("hidden_sise=128", "did you mean 'hidden_size'?"),
        ("hidden_act=nope", "unknown value 'nope'"),
    ],
)
def test_the_command_refuses_them_before_anything_runs(
    option: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", *TINY_HF, "--no-memory", "--results-dir", str(tmp_path), f"+model_options.{option}"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_the_command_runs_with_a_float_and_a_string_option(tmp_path: Path) -> None:
    args = ["train", *TINY_HF, "--no-memory", "--results-dir", str(tmp_path)]
    assert main([*args, "+model_options.rms_norm_eps=1e-5", "+model_options.hidden_act=gelu"]) == 0
