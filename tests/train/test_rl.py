"""The GRPO policy step: NeMo RL's phases, advantages, clipped loss with KL, clipping, a frozen reference."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from gymbench import GymbenchError
from gymbench.train.config import TrainConfig
from gymbench.train.plugin import build_mlp, build_transformer
from gymbench.train.rl import RL_PHASES, clipped_pg_loss, group_advantages
from gymbench.train.runner import run_steps
from gymbench.train.session import TrainSession

RL = TrainConfig(
    model="transformer", model_config={"size": "tiny"}, batch=8, seq_len=48, step="rl", lengths="uniform", steps=3
)
ONES = torch.ones(4, dtype=torch.bool)


def test_the_step_is_timed_under_nemo_rls_phase_names() -> None:
    timings = run_steps(TrainSession(build_transformer, replace(RL, accumulation=2, warmup=1)))
    assert tuple(timings.phases_s) == RL_PHASES
    assert RL_PHASES[1:4] == ("policy_and_reference_logprobs", "advantage_calculation", "policy_training")
    assert all(len(seconds) == 3 and min(seconds) > 0 for seconds in timings.phases_s.values())
    assert all(count.tokens > 0 and count.sequences == 8 for count in timings.counts)


def test_group_advantages_are_centred_and_scaled_within_each_group() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0])
    advantages = group_advantages(rewards, 4).view(2, 4)
    assert advantages[0].sum() == pytest.approx(0, abs=1e-6)
    assert advantages[0].std(unbiased=False) == pytest.approx(1, rel=1e-4)
    assert advantages[0, 0] > 0 > advantages[0, 1]
    assert torch.equal(advantages[1], torch.zeros(4))  # a group that all agrees teaches nothing


def test_kl_penalty_is_zero_where_policy_and_reference_agree_and_grows_apart() -> None:
    current = torch.log(torch.tensor([0.5, 0.4, 0.3, 0.2]))
    kwargs = {"ratio_clip": 0.2, "kl_penalty": 1.0}
    zero_advantage = torch.zeros(4)
    same = clipped_pg_loss(current, current, current, zero_advantage, ONES, torch.tensor(4.0), **kwargs)
    apart = clipped_pg_loss(current, current, current - 0.5, zero_advantage, ONES, torch.tensor(4.0), **kwargs)
    assert float(same) == 0.0 and float(apart) > 0


def test_the_ratio_clip_stops_the_gradient_past_the_trust_region() -> None:
    previous = torch.zeros(4)
    current = torch.tensor([0.0, 0.1, 0.5, -0.5], requires_grad=True)  # ratios 1, 1.11, 1.65, 0.61
    advantages = torch.ones(4)
    loss = clipped_pg_loss(
        current, previous, current.detach(), advantages, ONES, torch.tensor(4.0), ratio_clip=0.2, kl_penalty=0.0
    )
    loss.backward()
    assert current.grad is not None
    assert current.grad[2] == 0  # ratio 1.65 > 1.2 with a positive advantage: clipped
    assert current.grad[0] < 0 and current.grad[1] < 0 and current.grad[3] < 0


def test_gradients_are_clipped_to_max_grad_norm_and_the_reference_stays_frozen() -> None:
    session = TrainSession(build_transformer, replace(RL, max_grad_norm=1e-3, lr=1e-2))
    norms: list[float] = []
    original_step = session.optimizer.step

    def step_and_measure() -> None:
        grads = [p.grad for p in session.model.parameters() if p.grad is not None]
        norms.append(float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))))
        original_step()

    session.optimizer.step = step_and_measure
    reference = [p.clone() for p in session.kind.reference.parameters()]
    policy = [p.clone() for p in session.model.parameters()]
    for _ in range(2):
        session.step()
    assert norms and max(norms) <= 1e-3 * (1 + 1e-4)
    assert all(torch.equal(a, b) for a, b in zip(reference, session.kind.reference.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(policy, session.model.parameters(), strict=True))
    assert not any(p.requires_grad for p in session.kind.reference.parameters())


def test_rewards_come_from_the_rollouts_file_when_it_has_them(tmp_path: Path) -> None:
    rows = [{"reward": float(i % 4 == 0), "usage": {"prompt_tokens": 4, "completion_tokens": 4 + i}} for i in range(8)]
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    session = TrainSession(build_transformer, replace(RL, lengths="fixed", rollouts=str(path)))
    samples = session.kind.batches.source.draw(8, session.kind.batches.rng)
    rewards = session.kind.rewards(samples, session.device)
    assert rewards.tolist() == [s.reward for s in samples]
    session.step()
    assert session.last_count.tokens == sum(8 + i for i in range(8))


def test_a_model_without_token_logprobs_cannot_take_the_rl_step() -> None:
    with pytest.raises(GymbenchError, match="has no `token_logprobs`, which the RL step needs"):
        TrainSession(build_mlp, replace(RL, model="mlp"))
