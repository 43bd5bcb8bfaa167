"""The RL step with NeMo RL's GRPO defaults and 2 updates per batch against a plain-PyTorch reference.

The reference is written out by hand: one sequence at a time (no padding, no packing, no flat
logprob index), the leave-one-out baseline with explicit loops, the clamped KL written out, one
backward per update over the whole batch. The step packs, takes logprobs in batches of a size other
than the micro-batch, accumulates over micro-batches and reads the logprobs back by index. Both
start from the same weights, so losses and gradients of both updates must agree to float rounding.

``python -m tests.train.test_rl_reference`` prints the figure (max abs error of loss and grads).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch

from gymbench.train.config import TrainConfig
from gymbench.train.lengths import Sample
from gymbench.train.plugin import build_transformer
from gymbench.train.session import TrainSession

CONFIG = TrainConfig(
    model="transformer",
    model_config={"size": "tiny"},
    step="rl",
    batch=8,
    accumulation=2,
    group_size=4,
    seq_len=40,
    lengths="skewed",
    packing=True,
    grpo="nemo-rl",
    updates_per_batch=2,
    logprob_batch=3,
    lr=3e-2,
    ratio_clip=0.05,
    kl_penalty=0.5,
    threads=1,
)


def sequence_logprobs(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """Log-probability of each next token of one sequence, alone in its row."""
    logits = model.logits(ids[None, :-1], torch.arange(len(ids) - 1), None)[0].float()
    return torch.log_softmax(logits, dim=-1).gather(1, ids[1:, None])[:, 0]


def leave_one_out(rewards: list[float], group: int) -> list[float]:
    advantages = []
    for index, reward in enumerate(rewards):
        start = index - index % group
        others = [r for j, r in enumerate(rewards[start : start + group]) if start + j != index]
        mean = sum(others) / len(others)
        std = math.sqrt(sum((r - mean) ** 2 for r in others) / (len(others) - 1))
        advantages.append((reward - mean) / (std + 1e-6) if std > 0 else reward - mean)
    return advantages


def reference_updates(
    model: Any, samples: list[Sample], tokens: list[torch.Tensor], rewards: list[float], config: TrainConfig
) -> list[tuple[float, list[torch.Tensor], float]]:
    """(loss, gradients after clipping, share of clipped ratios) of each update."""
    frozen = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.effective_lr)
    with torch.no_grad():
        old = [sequence_logprobs(model, ids) for ids in tokens]
        ref = [sequence_logprobs(frozen, ids) for ids in tokens]
    advantages = leave_one_out(rewards, config.group_size)
    results = []
    for first in range(0, len(samples), config.batch):
        chosen = range(first, first + config.batch)
        loss_tokens = sum(samples[i].completion for i in chosen)  # predictions of the completion tokens
        loss = torch.zeros(())
        clipped = 0
        for i in chosen:
            keep = slice(samples[i].prompt - 1, samples[i].length - 1)
            current = sequence_logprobs(model, tokens[i])[keep]
            ratio = torch.exp(current - old[i][keep])
            clipped += int(((ratio - 1).abs() > config.ratio_clip).sum())
            low, high = 1 - config.ratio_clip, 1 + config.ratio_clip
            pg = torch.maximum(-advantages[i] * ratio, -advantages[i] * ratio.clamp(low, high))
            log_gap = (ref[i][keep] - current).clamp(-20, 20)
            kl = (torch.exp(log_gap) - log_gap - 1).clamp(max=10)
            loss = loss + (pg + config.kl_penalty * kl).sum() / loss_tokens
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), config.max_grad_norm)
        results.append((float(loss.detach()), [p.grad.clone() for p in model.parameters()], clipped / loss_tokens))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return results


def compare(config: TrainConfig = CONFIG) -> dict[str, float]:
    session = TrainSession(build_transformer, config)
    start = copy.deepcopy(session.model)
    step: Any = session.kind
    drawn: dict[str, Any] = {}
    draw_samples, rewards_of, finish = step.batches.draw_samples, step.rewards, session.finish_step
    grads: list[list[torch.Tensor]] = []
    losses: list[float] = []

    def keep_draw(*args: Any) -> Any:
        drawn["samples"], drawn["tokens"] = draw_samples(*args)
        return drawn["samples"], drawn["tokens"]

    def keep_rewards(*args: Any) -> Any:
        drawn["rewards"] = rewards_of(*args)
        return drawn["rewards"]

    def keep_grads(observer: Any) -> None:
        grads.append([p.grad.clone() for p in session.model.parameters()])
        finish(observer)

    update = step.update

    def keep_loss(*args: Any) -> Any:
        loss = update(*args)
        losses.append(float(loss))
        return loss

    step.batches.draw_samples, step.rewards, session.finish_step, step.update = (
        keep_draw,
        keep_rewards,
        keep_grads,
        keep_loss,
    )
    session.step()
    expected = reference_updates(start, drawn["samples"], drawn["tokens"], drawn["rewards"].tolist(), config)
    assert len(grads) == len(expected) == config.updates_per_batch
    loss_error = max(abs(a - b[0]) for a, b in zip(losses, expected, strict=True))
    grad_error = max(
        float((g - e).abs().max())
        for got, want in zip(grads, expected, strict=True)
        for g, e in zip(got, want[1], strict=True)
    )
    return {
        "loss_max_abs_error": loss_error,
        "grad_max_abs_error": grad_error,
        "grad_max_abs": max(float(e.abs().max()) for want in expected for e in want[1]),
        "clipped_share_update_1": expected[0][2],
        "clipped_share_update_2": expected[1][2],
    }


def test_two_updates_with_leave_one_out_match_a_plain_pytorch_reference() -> None:
    figures = compare()
    assert figures["loss_max_abs_error"] < 1e-5
    assert figures["grad_max_abs_error"] < 1e-5 * max(1.0, figures["grad_max_abs"])
    assert figures["clipped_share_update_1"] == 0  # on-policy: the ratio is 1
    assert figures["clipped_share_update_2"] > 0  # the policy moved: the clip path is taken


def test_the_logprob_batch_does_not_change_the_step() -> None:
    """NeMo RL's logprob_batch_size is a memory knob: the same losses whatever it is (to rounding:
    another layout sums in another order, and the second update amplifies that)."""
    losses = []
    for size in (None, 1, 3, 16):
        config = TrainConfig(**{**CONFIG.to_dict(), "logprob_batch": size})
        losses.append(float(TrainSession(build_transformer, config).step()))
    assert max(losses) - min(losses) < 1e-5


def test_plain_and_nemo_rl_advantages_differ_as_documented() -> None:
    from gymbench.train.rl import group_advantages

    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    nemo = group_advantages(rewards, 4, "nemo-rl").view(2, 4)
    # sample 0: the others are (0, 0, 1): mean 1/3, Bessel std sqrt(1/3)
    assert float(nemo[0, 0]) == torch.tensor((1 - 1 / 3) / (math.sqrt(1 / 3) + 1e-6)).item()
    assert torch.equal(nemo[1], torch.zeros(4))
    assert not torch.allclose(nemo[0], group_advantages(rewards, 4, "plain").view(2, 4)[0])
    assert torch.equal(group_advantages(torch.tensor([1.0, 0.0]), 2, "nemo-rl"), torch.tensor([1.0, -1.0]))
    assert torch.equal(group_advantages(torch.tensor([1.0, 0.0]), 1, "nemo-rl"), torch.zeros(2))


def test_the_kl_is_clamped_under_nemo_rl() -> None:
    from gymbench.train.rl import clipped_pg_loss

    current, far = torch.zeros(1), torch.full((1,), 50.0)
    args = (current, current, far, torch.zeros(1), torch.ones(1, dtype=torch.bool), torch.tensor(1.0))
    assert float(clipped_pg_loss(*args, ratio_clip=0.2, kl_penalty=1.0, kl_clamp=(20.0, 10.0))) == 10.0
    assert float(clipped_pg_loss(*args, ratio_clip=0.2, kl_penalty=1.0)) > 1e20


def test_a_step_with_two_updates_counts_both_batches() -> None:
    session = TrainSession(build_transformer, CONFIG)
    session.step()
    assert session.last_count.sequences == CONFIG.batch * CONFIG.updates_per_batch
    assert session.samples_per_step == 16


if __name__ == "__main__":
    for name, value in compare().items():
        print(f"{name:24} {value:.3g}")
