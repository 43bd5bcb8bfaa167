"""NeMo RL's GRPO policy step, timed by phase under the names NeMo RL's trainer logs.

After generation, NeMo RL's GRPO loop computes, on the generated sequences:

- ``policy_and_reference_logprobs``: forward-only log-probabilities of the policy (the "old"
  policy of the ratio) and of a frozen reference model (for the KL penalty), ``logprob_batch``
  samples per forward (NeMo RL's ``logprob_batch_size``, independent of the training micro-batch);
- ``advantage_calculation``: per-group rewards become advantages: reward less a baseline, over a
  standard deviation. ``grpo=plain`` takes the group's mean and population std; ``grpo=nemo-rl``
  takes NeMo RL's defaults: the mean of the *other* samples of the group (leave-one-out) and their
  Bessel-corrected std, normalising only where that std is above 0;
- ``policy_training``: the clipped policy-gradient loss with a KL penalty to the reference
  (NeMo RL's ``ClippedPGLossFn``, token-level, normalised by the update's valid tokens; under
  ``nemo-rl`` the KL's log-ratio is clamped to ±20 and the KL to ≤ 10, NeMo RL's
  ``kl_input_clamp_value`` and ``kl_output_clamp_value``), backward over the micro-batches, and
  gradient-norm clipping;
- ``optimizer``: the AdamW step. NeMo RL's own ``policy_training`` timer also covers this step, so
  its figure is gymbench's ``policy_training`` plus ``optimizer``.

With ``updates_per_batch`` U above 1, a step draws U batches of rollouts, takes their "old"
logprobs once, and makes U optimizer updates, one per batch (NeMo RL when ``num_prompts_per_step x
num_generations_per_prompt`` is U x ``train_global_batch_size``). From the second update on the
policy has moved since the logprobs were taken, so the ratio leaves 1 and the clip acts.

Generation itself is not part of this step (gymbench's collection benchmarks measure it), nor are
the refit and weight transfers between trainer and generation server.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from gymbench.train.packing import SequenceBatch, StepCount
from gymbench.train.phases import PhaseObserver
from gymbench.train.steps import SequenceBatches, masked_sum, token_logprobs, valid_tokens

if TYPE_CHECKING:
    from gymbench.train.lengths import Sample
    from gymbench.train.session import TrainSession

RL_PHASES: tuple[str, ...] = (
    "data",
    "policy_and_reference_logprobs",
    "advantage_calculation",
    "policy_training",
    "optimizer",
)
ADVANTAGE_EPS = 1e-6
KL_CLAMPS = {"plain": None, "nemo-rl": (20.0, 10.0)}
"""Per GRPO variant: the clamp of the KL's log-ratio and of the KL itself (NeMo RL's
``kl_input_clamp_value`` and ``kl_output_clamp_value`` defaults)."""


def group_advantages(rewards: torch.Tensor, group_size: int, variant: str = "plain") -> torch.Tensor:
    """GRPO: each reward against a baseline from its group, in units of a standard deviation.

    ``plain``: the group's mean and population std. ``nemo-rl``: the mean and Bessel-corrected std of
    the group's *other* rewards (leave-one-out, unbiased: a sample does not lower its own baseline);
    where that std is 0 (fewer than 3 samples, or equal rewards) the advantage is not normalised,
    and a group of one gets advantage 0, as NeMo RL does.
    """
    groups = rewards.view(-1, group_size)
    if variant == "plain":
        mean = groups.mean(dim=1, keepdim=True)
        std = groups.std(dim=1, unbiased=False, keepdim=True)
        return ((groups - mean) / (std + ADVANTAGE_EPS)).flatten()
    if group_size == 1:
        return torch.zeros_like(rewards)
    others = ~torch.eye(group_size, dtype=torch.bool, device=rewards.device)
    left_out = groups[:, None, :].expand(-1, group_size, -1)[:, others].view(-1, group_size, group_size - 1)
    centred = groups - left_out.mean(dim=2)
    if group_size < 3:
        return centred.flatten()
    std = left_out.std(dim=2, unbiased=True)
    return torch.where(std > 0, centred / (std + ADVANTAGE_EPS), centred).flatten()


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
    kl_clamp: tuple[float, float] | None = None,
) -> torch.Tensor:
    """``max(-A·r, -A·clip(r, 1-ε, 1+ε)) + β·KL`` summed over loss tokens / the global token count.

    The KL term is Schulman's estimator ``exp(ref - cur) - (ref - cur) - 1`` (NeMo RL's ``k3``):
    non-negative, zero where the two policies agree. ``kl_clamp = (a, b)`` clamps the log-ratio to
    ±a and the KL to ≤ b, as NeMo RL does, so one token far from the reference cannot blow up.
    """
    ratio = torch.exp(current - previous)
    clipped = ratio.clamp(1.0 - ratio_clip, 1.0 + ratio_clip)
    policy_gradient = torch.maximum(-advantages * ratio, -advantages * clipped)
    log_gap = reference - current
    if kl_clamp is not None:
        log_gap = log_gap.clamp(-kl_clamp[0], kl_clamp[0])
    kl = torch.exp(log_gap) - log_gap - 1.0
    if kl_clamp is not None:
        kl = kl.clamp(max=kl_clamp[1])
    return masked_sum(policy_gradient + kl_penalty * kl, mask) / denominator


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The reference policy: the policy's starting weights, never trained."""
    reference = copy.deepcopy(model).eval()
    for parameter in reference.parameters():
        parameter.requires_grad_(False)
    return reference


@dataclass(frozen=True)
class Placed:
    """A laid-out batch and, per slot, the drawn sample and the token of the step it holds, so that
    logprobs taken in one layout (the logprob batches) are read back in another (the micro-batches)."""

    batch: SequenceBatch
    samples: torch.Tensor
    tokens: torch.Tensor


def place(batch: SequenceBatch, first: int, offsets: torch.Tensor) -> Placed:
    """``first``: the step-wide index of the batch's first sample; ``offsets``: each sample's first
    token in the step. Pad slots point at their batch's first sample (the loss mask drops them)."""
    samples = first + batch.segments.clamp(min=0)
    return Placed(batch, samples, offsets[samples] + batch.positions)


class RLStep:
    phases = RL_PHASES

    def __init__(self, session: TrainSession) -> None:
        self.batches = SequenceBatches(session, completion_only=True)
        self.lengths = self.batches.source.describe()
        self.reference = frozen_copy(session.model)

    def run(self, session: TrainSession, observer: PhaseObserver) -> torch.Tensor:
        config = session.config
        with observer.phase("data"):
            samples, tokens = self.batches.draw_samples(session, config.rollouts_per_step)
            rewards = self.rewards(samples, session.device)
            updates, logprob_batches = self.lay_out(session, samples, tokens)
        with observer.phase("policy_and_reference_logprobs"):
            total_tokens = sum(sample.length for sample in samples)
            previous, reference = self.logprobs(session, logprob_batches, total_tokens)
        with observer.phase("advantage_calculation"):
            advantages = group_advantages(rewards, config.group_size, config.grpo)
        total = torch.zeros((), device=session.device)
        for placed in updates:
            total += self.update(session, observer, placed, previous, reference, advantages)
        session.last_count = sum((p.batch.count for update in updates for p in update), StepCount())
        return total / len(updates)

    def lay_out(
        self, session: TrainSession, samples: list[Sample], tokens: list[torch.Tensor]
    ) -> tuple[list[list[Placed]], list[Placed]]:
        """The micro-batches of each update, and the logprob batches (the same ones when the sizes agree)."""
        config = session.config
        lengths = torch.tensor([0] + [sample.length for sample in samples])
        offsets = lengths.cumsum(0)[:-1].to(session.device)

        def chunks(first: int, count: int, size: int) -> list[Placed]:
            batches = self.batches.chunks(session, samples[first : first + count], tokens[first : first + count], size)
            return [place(batch, first + index * size, offsets) for index, batch in enumerate(batches)]

        updates = [chunks(first, config.batch, config.micro_batch) for first in range(0, len(samples), config.batch)]
        size = config.logprob_batch or config.micro_batch
        if size == config.micro_batch:
            return updates, [placed for update in updates for placed in update]
        return updates, chunks(0, len(samples), size)

    def update(
        self,
        session: TrainSession,
        observer: PhaseObserver,
        placed: list[Placed],
        previous: torch.Tensor,
        reference: torch.Tensor,
        advantages: torch.Tensor,
    ) -> torch.Tensor:
        """One optimizer update over one batch's micro-batches; returns its loss."""
        denominator = valid_tokens([p.batch for p in placed])
        total = torch.zeros((), device=session.device)
        for p in placed:
            with observer.phase("policy_training"):
                observer.mark("forward_start")
                with session.precision.autocast():
                    current = token_logprobs(session.model, p.batch)
                observer.mark("forward_end")
                inputs = (previous[p.tokens], reference[p.tokens], advantages[p.samples])
                loss = self.loss(session, current, p.batch, *inputs, denominator)
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
        self, session: TrainSession, placed: list[Placed], total_tokens: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy's and the reference's logprob of every token of the step, flat (``Placed.tokens``
        indexes them), so the micro-batches may lay the samples out differently."""
        previous = torch.zeros(total_tokens, device=session.device)
        reference = torch.zeros(total_tokens, device=session.device)
        with torch.no_grad(), session.precision.autocast():
            for p in placed:
                real = p.batch.segments >= 0
                previous[p.tokens[real]] = token_logprobs(session.model, p.batch)[real]
                reference[p.tokens[real]] = token_logprobs(self.reference, p.batch)[real]
        return previous, reference

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
            kl_clamp=KL_CLAMPS[config.grpo],
        )
