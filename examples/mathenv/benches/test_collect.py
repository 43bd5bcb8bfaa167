"""Collection from mathenv at several parallelism values: rollouts/s, latency, reward, error rate.

Runs against the simulator configured in pyproject.toml unless the command line names a server.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("num_samples_in_parallel", [4, 16, 64])
def test_collect(gymbench, num_samples_in_parallel):
    limit = 32 if gymbench.quick else 256
    result = gymbench.collect(limit=limit, num_samples_in_parallel=num_samples_in_parallel)
    assert result.failed == 0
    assert result.mean_reward is not None and result.mean_reward >= 0.5, "the environment's reward collapsed"


@pytest.mark.asyncio
async def test_collect_with_repeats(gymbench):
    """Four rollouts per task, as GRPO samples a group per prompt."""
    result = await gymbench.collect(limit=8 if gymbench.quick else 64, num_repeats=4, num_samples_in_parallel=32)
    assert result.completed == (32 if gymbench.quick else 256)
