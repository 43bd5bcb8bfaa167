from __future__ import annotations

import pytest
import torch

from gymbench import GymbenchError
from gymbench.train.models import BenchModel, build_mlp, build_transformer, flop_parameter_count


def test_size_preset_with_overrides() -> None:
    model = build_transformer({"size": "tiny", "layers": "3"})
    assert len(model.blocks) == 3
    assert model.config.d_model == 32


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"size": "huge"}, "unknown model size 'huge'"),
        ({"size": "tiny", "depht": 3}, "unknown model option.*depht.*takes width, depth, classes"),
        ({"size": "tiny", "width": "wide"}, "must be integers"),
    ],
)
def test_bad_model_options_are_clear_errors(config: dict, message: str) -> None:
    with pytest.raises(GymbenchError, match=message):
        build_mlp(config)


@pytest.mark.parametrize("build", [build_mlp, build_transformer])
def test_models_follow_the_contract_and_train(build: object) -> None:
    model = build({"size": "tiny"})
    assert isinstance(model, BenchModel)
    inputs, targets = model.make_batch(3, 8, torch.Generator().manual_seed(0))
    loss = model(inputs, targets)
    loss.backward()
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters())


def test_transformer_refuses_sequences_beyond_its_positions() -> None:
    model = build_transformer({"size": "tiny", "max_seq": 16})
    with pytest.raises(GymbenchError, match="exceeds the model's max_seq 16"):
        model.make_batch(1, 17, torch.Generator())


def test_flop_parameter_count_skips_embeddings() -> None:
    model = build_transformer({"size": "tiny"})
    total = sum(p.numel() for p in model.parameters())
    embeddings = model.embed.weight.numel() + model.position.weight.numel()
    assert flop_parameter_count(model) == total - embeddings


def test_hugging_face_model_when_transformers_is_installed() -> None:
    pytest.importorskip("transformers")
    from gymbench.train.hf import build_hf_causal_lm

    model = build_hf_causal_lm({"size": "tiny"})
    assert isinstance(model, BenchModel) and len(model.blocks) == 2
    inputs, targets = model.make_batch(2, 8, torch.Generator().manual_seed(0))
    assert torch.isfinite(model(inputs, targets))
