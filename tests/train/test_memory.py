"""Memory pass (a real subprocess with fixed malloc thresholds) and the leak check."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gymbench import GymbenchError
from gymbench.train.config import TrainConfig
from gymbench.train.memory import check_leak
from gymbench.train.runner import malloc_in_use, memory_now, run_steps
from gymbench.train.session import TrainSession
from gymbench.train.worker import WorkerJob, run_job
from tests.train.models_for_tests import build_leaky, build_tiny_mlp

MiB = 1 << 20
WIDE = TrainConfig(model="mlp", model_config={"width": 256, "depth": 4}, batch=512, threads=1)


def memory_of(config: TrainConfig) -> dict:
    return run_job(WorkerJob("memory", build_tiny_mlp, config))


def test_cpu_memory_pass_is_process_rss_and_checkpointing_shrinks_activations() -> None:
    plain = memory_of(WIDE)
    checkpointed = memory_of(replace(WIDE, checkpointing="on"))
    assert plain["label"] == "process RSS"
    # four blocks of batch x 4·width fp32 activations, several saved per block: well over 8 MiB
    assert plain["activation_bytes"] > 8 * MiB
    assert checkpointed["activation_bytes"] < 0.5 * plain["activation_bytes"]
    assert plain["peak_bytes"] >= plain["baseline_bytes"] + plain["step_peak_bytes"] - MiB


def test_unpicklable_factory_is_a_clear_error() -> None:
    with pytest.raises(GymbenchError, match="module-level factory function"):
        run_job(WorkerJob("memory", lambda config: None, WIDE))


@pytest.mark.parametrize("steps", [5, 12])
def test_leak_verdict_is_per_step_so_it_does_not_depend_on_the_step_count(steps: int) -> None:
    config = TrainConfig(model="leaky", batch=4, steps=steps, warmup=1)
    leaky = run_steps(TrainSession(build_leaky, config))
    sound = run_steps(TrainSession(build_tiny_mlp, replace(config, model="mlp")))
    bound = 1 * MiB  # per step
    flagged = check_leak(leaky.memory_bytes, bound, leaky.memory_source)
    assert flagged.leaked and flagged.growth_per_step_bytes == pytest.approx(4 * MiB, rel=0.25)
    assert flagged.steps == steps
    assert not check_leak(sound.memory_bytes, bound, sound.memory_source).leaked


def test_the_cpu_leak_check_reads_live_bytes_which_fall_when_tensors_are_freed() -> None:
    """RSS keeps what glibc has not returned (and ratchets up with each new longest batch);
    malloc's in-use count is what live tensors hold, like CUDA's memory_allocated."""
    before = malloc_in_use()
    if before is None:
        pytest.skip("no glibc mallinfo2 here; the leak check falls back to RSS")
    held = torch.ones(16 << 20)  # 64 MiB
    during = malloc_in_use()
    del held
    after = malloc_in_use()
    assert during is not None and after is not None
    assert during - before >= 64 * MiB and abs(after - before) < MiB
    assert memory_now(TrainSession(build_tiny_mlp, WIDE))[1] == "malloc bytes in use (glibc mallinfo2)"


def test_leak_check_needs_a_few_steps() -> None:
    check = check_leak([1, 2], 0, "process RSS")
    assert not check.leaked and "too few steps" in check.source
