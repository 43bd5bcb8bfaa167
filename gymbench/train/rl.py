"""NeMo RL's GRPO policy step, timed by phase under the names NeMo RL's trainer logs.

After generation, NeMo RL's GRPO loop computes, on the generated sequences:

- ``policy_and_reference_logprobs``: forward-only log-probabilities of the policy (the "old"
  policy of the ratio) and of a frozen reference model (for the KL penalty);
- ``advantage_calculation``: per-group rewards become advantages (reward less the group mean,
  over the group's standard deviation);
- ``policy_training``: the clipped policy-gradient loss with a KL penalty to the reference
  (NeMo RL's ``ClippedPGLossFn``, token-level, normalised by the global batch's valid tokens),
  backward over the micro-batches, and gradient-norm clipping;
- ``optimizer``: the AdamW step. NeMo RL's own ``policy_training`` timer also covers this step, so
  its figure is gymbench's ``policy_training`` plus ``optimizer``.

Generation itself is not part of this step (gymbench's collection benchmarks measure it), nor are
the refit and weight transfers between trainer and generation server.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import numpy as np
import torch

from gymbench.train.packing import SequenceBatch
from gymbench.train.phases import PhaseObserver
from gymbench.train.steps import SequenceBatches, masked_sum, token_logprobs, valid_tokens

if TYPE_CHECKING:
    from gymbench.train.lengths import Sample
    from gymbench.train.session import TrainSession

RL_PHASES = ("data", "policy_and_reference_logprobs", "advantage_calculation", "policy_training", "optimizer")
ADVANTAGE_EPS = 1e-6


def group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """GRPO: each reward against its group's mean, in units of the group's standard deviation."""
    groups = rewards.view(-1, group_size)
    mean = groups.mean(dim=1, keepdim=True)
    std = groups.std(dim=1, unbiased=False, keepdim=True)
    return ((groups - mean) / (std + ADVANTAGE_EPS)).flatten()


def clipped_pg_loss(
    current: torch.Tensor,
    previous: torch.Tensor,
    reference: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    denominator: torch.Tensor,
    *,
    ratio_clip: float,
    kl_penalty: float,
) -> torch.Tensor:
    """``max(-A·r, -A·clip(r, 1-ε, 1+ε)) + β·KL`` summed over loss tokens / the global token count.

    The KL term is Schulman's estimator ``exp(ref - cur) - (ref - cur) - 1``, as NeMo RL's
    ``calculate_kl_penalty_joschu2020``: non-negative, zero where the two policies agree.
    """
    ratio = torch.exp(current - previous)
    clipped = ratio.clamp(1.0 - ratio_clip, 1.0 + ratio_clip)
    policy_gradient = torch.maximum(-advantages * ratio, -advantages * clipped)
    log_gap = reference - current
    kl = torch.exp(log_gap) - log_gap - 1.0
    return masked_sum(policy_gradient + kl_penalty * kl, mask) / denominator


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The reference policy: the policy's starting weights, never trained."""
    reference = copy.deepcopy(model).eval()
    for parameter in reference.parameters():
        parameter.requires_grad_(False)
    return reference


class RLStep:
    phases = RL_PHASES

    def __init__(self, session: TrainSession) -> None:
        self.batches = SequenceBatches(session, completion_only=True)
        self.lengths = self.batches.source.describe()
        self.reference = frozen_copy(session.model)

    def run(self, session: TrainSession, observer: PhaseObserver) -> torch.Tensor:
        with observer.phase("data"):
            samples, batches = self.batches.draw(session)
            rewards = self.rewards(samples, session.device)
            denominator = valid_tokens(batches)
        with observer.phase("policy_and_reference_logprobs"):
            previous, reference = self.logprobs(session, batches)
        with observer.phase("advantage_calculation"):
            advantages = self.token_advantages(session, rewards, batches)
        total = torch.zeros((), device=session.device)
        for index, batch in enumerate(batches):
            with observer.phase("policy_training"):
                observer.mark("forward_start")
                with session.precision.autocast():
                    current = token_logprobs(session.model, batch)
                observer.mark("forward_end")
                inputs = (previous[index], reference[index], advantages[index])
                loss = self.loss(session, current, batch, *inputs, denominator)
                session.precision.backward(loss)
                total += loss.detach()
                del loss, current
        with observer.phase("policy_training"):
            session.precision.clip_gradients(session.optimizer, session.config.max_grad_norm)
        session.finish_step(observer)
        return total

    def rewards(self, samples: list[Sample], device: torch.device) -> torch.Tensor:
        """The rollouts' rewards where the file has them; otherwise pass/fail, as a verifier gives."""
        drawn = self.batches.rng.integers(0, 2, size=len(samples))
        values = [s.reward if s.reward is not None else float(d) for s, d in zip(samples, drawn, strict=True)]
        return torch.tensor(np.asarray(values, dtype=np.float32), device=device)

    def logprobs(
        self, session: TrainSession, batches: list[SequenceBatch]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        with torch.no_grad(), session.precision.autocast():
            previous = [token_logprobs(session.model, batch) for batch in batches]
            reference = [token_logprobs(self.reference, batch) for batch in batches]
        return previous, reference

    def token_advantages(
        self, session: TrainSession, rewards: torch.Tensor, batches: list[SequenceBatch]
    ) -> list[torch.Tensor]:
        """Each token gets its sequence's advantage (a micro-batch's segments index its samples)."""
        per_sample = group_advantages(rewards, session.config.group_size)
        size = session.config.micro_batch
        chunks = [per_sample[start : start + size] for start in range(0, len(per_sample), size)]
        return [chunk[batch.segments.clamp(min=0)] for chunk, batch in zip(chunks, batches, strict=True)]

    @staticmethod
    def loss(
        session: TrainSession,
        current: torch.Tensor,
        batch: SequenceBatch,
        previous: torch.Tensor,
        reference: torch.Tensor,
        advantages: torch.Tensor,
        denominator: torch.Tensor,
    ) -> torch.Tensor:
        config = session.config
        return clipped_pg_loss(
            current,
            previous,
            reference,
            advantages,
            batch.loss_mask,
            denominator,
            ratio_clip=config.ratio_clip,
            kl_penalty=config.kl_penalty,
        )
