"""The Hugging Face causal LM (``+model=hf-causal-lm``): skipped where ``transformers`` is not installed."""

from __future__ import annotations

import pytest
import torch

from gymbench.train.config import TrainConfig
from gymbench.train.lengths import Sample
from gymbench.train.models import SequenceModel, flop_parameter_count
from gymbench.train.packing import pack

pytest.importorskip("transformers", reason="transformers is not installed: the hf-causal-lm model is not registered")

from gymbench.train.hf import build_hf_causal_lm  # noqa: E402


@pytest.mark.parametrize("model_type", ["qwen2", "mistral"])
def test_grouped_query_models_build_from_the_small_preset(model_type: str) -> None:
    model = build_hf_causal_lm({"model_type": model_type})
    inputs, targets = model.make_batch(2, 8, torch.Generator().manual_seed(0))
    assert torch.isfinite(model(inputs, targets))
    assert model.inner.config.num_key_value_heads == model.inner.config.num_attention_heads


def test_given_kv_heads_are_kept() -> None:
    model = build_hf_causal_lm({"model_type": "qwen2", "num_attention_heads": 4, "num_key_value_heads": 2})
    assert model.inner.config.num_key_value_heads == 2


def test_a_tied_head_counts_in_n() -> None:
    """gpt2 multiplies by its input embedding at the head: 6·N must include it."""
    model = build_hf_causal_lm({"model_type": "gpt2"})
    head = model.inner.get_output_embeddings().weight
    assert head is model.inner.get_input_embeddings().weight  # tied
    position = model.inner.transformer.wpe.weight.numel()
    assert flop_parameter_count(model) == sum(p.numel() for p in model.parameters()) - position


@pytest.mark.slow
def test_gpt2_model_flops_are_about_6n() -> None:
    from gymbench.train.flops import count_flops
    from gymbench.train.session import TrainSession

    config = TrainConfig(model="hf-causal-lm", model_config={"model_type": "gpt2"}, batch=2, seq_len=16, threads=1)
    session = TrainSession(build_hf_causal_lm, config)
    report = count_flops(session, attention=True)
    assert report.ratio_to_rule(session.last_count) == pytest.approx(1.0, abs=0.1)  # was 1.80


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "gpt2"])
def test_packed_rows_do_not_leak_across_documents(model_type: str) -> None:
    model = build_hf_causal_lm({"model_type": model_type}).eval()
    assert isinstance(model, SequenceModel)
    generator = torch.Generator().manual_seed(1)
    samples = [Sample(3, 9), Sample(2, 6), Sample(4, 4)]
    tokens = [torch.randint(0, model.vocab_size, (s.length,), generator=generator) for s in samples]
    packed = pack(samples, tokens, 32, completion_only=False)
    assert packed.tokens.shape[0] == 1  # one row holds all three
    with torch.no_grad():
        together = model.token_logprobs(packed.tokens, packed.targets, packed.positions, packed.attn_mask)
        for index, ids in enumerate(tokens):
            alone = model.token_logprobs(ids[None, :-1], ids[None, 1:], torch.arange(len(ids) - 1)[None], None)[0]
            slots = (packed.segments[0] == index).nonzero()[:, 0][:-1]
            assert (together[0, slots] - alone).abs().max() < 1e-5
