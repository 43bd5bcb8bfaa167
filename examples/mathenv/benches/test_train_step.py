"""The policy's training step: fp32 against bf16, activation checkpointing off and on, and the
largest batch that fits. Each case is one benchmark id (``test_train_step[checkpointing=on,precision=bf16]``),
so a baseline saved on main matches the same case on a pull request.

The settings are exactly ``gymbench train``'s; ``[tool.gymbench.train]`` in pyproject.toml holds the
model this environment trains. ``gymbench train --model transformer --size tiny --precision bf16``
prints the same figures on the command line.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("checkpointing", ["off", "on"])
def test_train_step(gymbench, precision, checkpointing):
    result = gymbench.train_step(precision=precision, checkpointing=checkpointing, steps=3 if gymbench.quick else 10)
    assert result.tokens_per_s > 0


def test_rl_policy_step(gymbench):
    """NeMo RL's GRPO policy step on lengths like this environment's answers, packed."""
    result = gymbench.train_step(step="rl", lengths="skewed", packing=True, steps=2 if gymbench.quick else 8)
    assert result.value("phase_policy_training") > 0


def test_largest_batch(gymbench):
    """The largest batch in a 256 MiB budget: CI notices when a change makes the model need more memory."""
    result = gymbench.find_batch(memory_budget_mib=256, max_batch=64 if gymbench.quick else 1024, verify_runs=0)
    assert result.chosen_batch >= 1
