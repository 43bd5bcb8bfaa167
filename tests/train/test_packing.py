"""Packing keeps sequences apart: packed and padded steps compute the same losses and gradients."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gymbench.train.config import TrainConfig
from gymbench.train.lengths import Sample
from gymbench.train.models import build_transformer
from gymbench.train.packing import first_fit_decreasing, pack, pad, random_tokens
from gymbench.train.plugin import build_transformer as factory
from gymbench.train.session import TrainSession

SAMPLES = [Sample(3, 9), Sample(2, 4), Sample(5, 20), Sample(1, 3), Sample(4, 4)]
SKEWED = TrainConfig(
    model="transformer", model_config={"size": "tiny"}, batch=8, seq_len=64, lengths="skewed", min_len=4
)


def test_first_fit_decreasing_respects_the_capacity_and_keeps_every_sequence() -> None:
    rows = first_fit_decreasing(SAMPLES, capacity=32)
    assert sorted(i for row in rows for i in row) == list(range(len(SAMPLES)))
    assert all(sum(SAMPLES[i].length for i in row) <= 32 for row in rows)
    assert len(rows) == 2
    with pytest.raises(ValueError, match="cannot be packed"):
        first_fit_decreasing(SAMPLES, capacity=24)


def test_layouts_count_real_tokens_slots_and_the_padding_share() -> None:
    tokens = random_tokens(SAMPLES, 128, torch.Generator().manual_seed(0))
    padded = pad(SAMPLES, tokens, completion_only=True)
    packed = pack(SAMPLES, tokens, 32, completion_only=True)
    assert padded.tokens.shape == (5, 25) and padded.attn_mask is None
    assert packed.tokens.shape == (2, 31) and packed.attn_mask is not None
    for batch in (padded, packed):
        assert batch.count.tokens == 55 and int(batch.loss_mask.sum()) == sum(s.completion for s in SAMPLES)
        assert batch.count.real_pairs == sum(s.length**2 for s in SAMPLES)
    assert padded.count.padding_share == pytest.approx(1 - 55 / 125)
    assert packed.count.padding_share == pytest.approx(1 - 55 / 62)


def test_the_block_mask_keeps_packed_sequences_from_seeing_each_other() -> None:
    torch.manual_seed(0)
    model = build_transformer({"size": "tiny"})
    generator = torch.Generator().manual_seed(1)
    tokens = random_tokens(SAMPLES, model.vocab_size, generator)
    changed = [t.clone() for t in tokens]
    changed[2] = torch.randint(0, model.vocab_size, changed[2].shape, generator=generator)
    before, after = (pack(SAMPLES, ids, 32, completion_only=False) for ids in (tokens, changed))
    with torch.no_grad():
        logprobs = [model.token_logprobs(b.tokens, b.targets, b.positions, b.attn_mask) for b in (before, after)]
    others = (before.segments != 2) & (before.segments >= 0)
    torch.testing.assert_close(logprobs[0][others], logprobs[1][others])
    assert not torch.allclose(logprobs[0][before.segments == 2], logprobs[1][before.segments == 2])


def first_step_gradients(config: TrainConfig) -> tuple[float, list[torch.Tensor]]:
    """The first step's loss and gradients, read before the optimizer consumes them."""
    session = TrainSession(factory, config)
    grads: list[torch.Tensor] = []
    session.optimizer.step = lambda: grads.extend(p.grad.clone() for p in session.model.parameters())
    loss = float(session.step())
    return loss, grads


@pytest.mark.parametrize("step", ["lm", "rl"])
@pytest.mark.parametrize("changes", [{"packing": True}, {"accumulation": 2}, {"packing": True, "accumulation": 4}])
def test_packing_and_accumulation_change_how_not_what(step: str, changes: dict) -> None:
    base = replace(SKEWED, step=step)
    loss, grads = first_step_gradients(base)
    other_loss, other_grads = first_step_gradients(replace(base, **changes))
    assert other_loss == pytest.approx(loss, rel=1e-5, abs=1e-6)
    for a, b in zip(grads, other_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=2e-6)


def test_packing_cuts_the_slots_a_skewed_batch_needs() -> None:
    padded, packed = (TrainSession(factory, replace(SKEWED, batch=32, packing=p)) for p in (False, True))
    padded.step()
    packed.step()
    assert padded.last_count.tokens == packed.last_count.tokens
    assert padded.last_count.padding_share > 0.3 > 0.15 > packed.last_count.padding_share
