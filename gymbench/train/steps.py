"""The language-model training steps: on the model's own fixed-shape batch, or on sequences.

The sequence step draws its lengths (a distribution or a rollouts file), lays them out padded or
packed (:mod:`gymbench.train.packing`) and takes the next-token loss over real tokens only,
normalised by the token count of the whole global batch, so that gradient accumulation gives the
same gradient as one big batch and packing gives the same gradient as padding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from gymbench.train.config import length_source
from gymbench.train.packing import SequenceBatch, StepCount, pack, pad, random_tokens
from gymbench.train.phases import LM_PHASES, PhaseObserver

if TYPE_CHECKING:
    from gymbench.train.lengths import Sample
    from gymbench.train.session import TrainSession


class FixedLMStep:
    """The model's own ``make_batch`` and ``forward(inputs, targets) -> loss``."""

    phases = LM_PHASES
    lengths = ""

    def run(self, session: TrainSession, observer: PhaseObserver) -> torch.Tensor:
        config = session.config
        total = torch.zeros((), device=session.device)
        for _ in range(config.accumulation):
            with observer.phase("data"):
                batch = session.data()
            with observer.phase("forward"):
                observer.mark("forward_start")
                loss = session.forward(batch)
                observer.mark("forward_end")
            with observer.phase("backward"):
                session.precision.backward(loss)
                total += loss.detach()
                del loss, batch
        session.finish_step(observer)
        tokens = config.batch * session.model.tokens_per_sample(config.seq_len)
        length = session.model.tokens_per_sample(config.seq_len)
        session.last_count = StepCount(config.batch, tokens, tokens, tokens * length, tokens * length)
        return total


class SequenceBatches:
    """Draws a global batch of samples and lays it out as micro-batches on the device."""

    def __init__(self, session: TrainSession, *, completion_only: bool) -> None:
        self.source = length_source(session.config)
        self.capacity = self.source.longest
        """A packed row holds up to the longest sequence the source can produce."""
        self.rng = np.random.default_rng(session.config.seed)
        self.completion_only = completion_only

    def draw(self, session: TrainSession) -> tuple[list[Sample], list[SequenceBatch]]:
        config = session.config
        samples, tokens = self.draw_samples(session, config.batch)
        batches = self.chunks(session, samples, tokens, config.micro_batch)
        session.last_count = sum((batch.count for batch in batches), StepCount())
        return samples, batches

    def draw_samples(self, session: TrainSession, count: int) -> tuple[list[Sample], list[torch.Tensor]]:
        """``count`` samples and their tokens, drawn once so that several layouts hold the same data."""
        samples = self.source.draw(count, self.rng)
        return samples, random_tokens(samples, session.model.vocab_size, session.generator)

    def chunks(
        self, session: TrainSession, samples: list[Sample], tokens: list[torch.Tensor], size: int
    ) -> list[SequenceBatch]:
        """The samples laid out ``size`` at a time (a micro-batch, or a logprob batch)."""
        starts = range(0, len(samples), size)
        return [self.lay_out(session, samples[s : s + size], tokens[s : s + size]) for s in starts]

    def lay_out(self, session: TrainSession, samples: list[Sample], tokens: list[torch.Tensor]) -> SequenceBatch:
        if session.config.packing:
            batch = pack(samples, tokens, self.capacity, completion_only=self.completion_only)
        else:
            batch = pad(samples, tokens, completion_only=self.completion_only)
        return batch.to(session.device)


def token_logprobs(model: torch.nn.Module, batch: SequenceBatch) -> torch.Tensor:
    return model.token_logprobs(batch.tokens, batch.targets, batch.positions, batch.attn_mask)  # type: ignore[operator]


def valid_tokens(batches: list[SequenceBatch]) -> torch.Tensor:
    """NeMo RL's ``global_valid_toks``: the loss positions of the whole global batch (at least 1)."""
    return sum(batch.loss_mask.sum() for batch in batches).clamp(min=1)  # type: ignore[union-attr]


def masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``where`` rather than multiply: a pad position's value may be anything, NaN included."""
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device)).sum()


class SequenceLMStep:
    """Next-token loss on every real token of variable-length sequences, padded or packed."""

    phases = LM_PHASES

    def __init__(self, session: TrainSession) -> None:
        self.batches = SequenceBatches(session, completion_only=False)
        self.lengths = self.batches.source.describe()

    def run(self, session: TrainSession, observer: PhaseObserver) -> torch.Tensor:
        with observer.phase("data"):
            _, batches = self.batches.draw(session)
            denominator = valid_tokens(batches)
        total = torch.zeros((), device=session.device)
        for batch in batches:
            with observer.phase("forward"):
                observer.mark("forward_start")
                with session.precision.autocast():
                    loss = -masked_sum(token_logprobs(session.model, batch), batch.loss_mask) / denominator
                observer.mark("forward_end")
            with observer.phase("backward"):
                session.precision.backward(loss)
                total += loss.detach()
                del loss
        session.finish_step(observer)
        return total
