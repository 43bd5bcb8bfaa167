"""The training step itself: accumulation, checkpointing and precision change how, not what."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gymbench import GymbenchError
from gymbench.train import runner
from gymbench.train.checkpointing import Checkpointed, blocks_for_ratio, checkpoint_every
from gymbench.train.config import TrainConfig, scale_learning_rate
from gymbench.train.plugin import build_mlp, build_transformer
from gymbench.train.runner import run_steps
from gymbench.train.session import TrainSession
from tests.train.models_for_tests import build_overflowing

TINY = TrainConfig(model="transformer", model_config={"size": "tiny"}, batch=4, seq_len=16, steps=3, warmup=1)


def gradients_after_one_step(config: TrainConfig) -> list[torch.Tensor]:
    """Gradients of the first step, read before the optimizer consumes them."""
    session = TrainSession(build_transformer, config)
    grads: list[torch.Tensor] = []
    session.optimizer.step = lambda: grads.extend(p.grad.clone() for p in session.model.parameters())
    session.step()
    return grads


def test_accumulation_keeps_the_global_batch_and_the_gradient() -> None:
    whole = gradients_after_one_step(TINY)
    split = gradients_after_one_step(replace(TINY, accumulation=2))
    for a, b in zip(whole, split, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_checkpointing_changes_memory_not_gradients() -> None:
    plain = gradients_after_one_step(TINY)
    checkpointed = gradients_after_one_step(replace(TINY, checkpointing="on"))
    for a, b in zip(plain, checkpointed, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(("mode", "wrapped"), [("off", 0), ("on", 4), ("every-2", 2), ("every-3", 2)])
def test_every_kth_block_is_checkpointed(mode: str, wrapped: int) -> None:
    config = replace(TINY, model_config={"size": "tiny", "layers": 4}, checkpointing=mode)
    session = TrainSession(build_transformer, config)
    assert session.checkpointed_blocks == wrapped
    assert sum(isinstance(block, Checkpointed) for block in session.model.blocks) == wrapped


@pytest.mark.parametrize(
    ("ratio", "indices", "note"),
    [
        (0.5, [0, 2], ""),
        (0.75, [0, 1, 2], ""),
        (1.0, [0, 1, 2, 3], ""),
        (0.0, [], ""),
        (0.3, [0], "1 of 4 blocks checkpointed (25%)"),
        (0.6, [0, 2], "2 of 4 blocks checkpointed (50%)"),
    ],
)
def test_checkpoint_ratio_is_exact_or_says_what_it_did(ratio: float, indices: list[int], note: str) -> None:
    chosen, said = blocks_for_ratio(ratio, 4)
    assert chosen == indices
    assert (note in said) if note else said == ""
    config = replace(TINY, model_config={"size": "tiny", "layers": 4}, checkpoint_ratio=ratio)
    session = TrainSession(build_transformer, config)
    wrapped = [i for i, block in enumerate(session.model.blocks) if isinstance(block, Checkpointed)]
    assert wrapped == indices and session.checkpointing.note == said


def test_checkpoint_modes() -> None:
    for bad in ("sometimes", "every-0", "every-x"):
        with pytest.raises(GymbenchError, match="use 'off', 'on' or 'every-K'"):
            checkpoint_every(bad)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"batch": 6, "accumulation": 4}, "not divisible by accumulation 4"),
        ({"precision": "fp8"}, "unknown precision 'fp8'"),
        ({"steps": 0}, "steps must be at least 1"),
        ({"device": "tpu"}, "unknown device 'tpu'"),
    ],
)
def test_bad_configuration_is_refused(changes: dict, message: str) -> None:
    with pytest.raises(GymbenchError, match=message):
        replace(TINY, **changes)


def test_cuda_without_a_gpu_is_an_input_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(GymbenchError, match="no CUDA GPU"):
        TrainSession(build_mlp, replace(TINY, device="cuda"))


class OperationClock(TorchDispatchMode):
    """A clock that reads the number of tensor operations run so far (forward, backward and
    optimizer alike): the timing loop's arithmetic on a clock no machine load can move."""

    def __init__(self) -> None:
        super().__init__()
        self.operations = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.operations += 1
        return func(*args, **(kwargs or {}))

    def perf_counter(self) -> float:
        return float(self.operations)


def test_warmup_is_excluded_and_phases_add_up_to_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Timed in tensor operations instead of seconds. The first step also creates AdamW's state, so
    it runs more operations than the rest: every measured step equal means the warm-up is not among
    them. All of a step's operations but the loss total's one ``zeros`` run inside its phases."""
    clock = OperationClock()
    monkeypatch.setattr(runner, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    with clock:
        timings = run_steps(TrainSession(build_transformer, replace(TINY, steps=4, warmup=2)))
    assert len(timings.step_s) == 4 and len(timings.losses) == 4
    assert len(set(timings.step_s)) == 1, timings.step_s
    for index, step in enumerate(timings.step_s):
        phases = [seconds[index] for seconds in timings.phases_s.values()]
        assert all(phase > 0 for phase in phases), timings.phases_s
        assert step - 1 <= sum(phases) <= step, (step, timings.phases_s)


def test_bf16_autocast_runs_matmuls_in_bf16() -> None:
    session = TrainSession(build_mlp, replace(TINY, model="mlp", precision="bf16"))
    seen: list[torch.dtype] = []
    session.model.head.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    session.step()
    assert seen == [torch.bfloat16]


def test_fp16_loss_scaling_records_scale_and_skipped_steps() -> None:
    config = replace(TINY, model="overflowing", precision="fp16", steps=3, warmup=0)
    session = TrainSession(build_overflowing, config)
    run_steps(session)
    scaling = session.precision.scaling
    assert scaling.enabled and scaling.skipped_steps == 3
    assert scaling.scales == sorted(scaling.scales, reverse=True) and scaling.scales[-1] < 65536.0


def test_square_root_learning_rate_rule() -> None:
    assert scale_learning_rate(1e-4, 128, 32) == pytest.approx(2e-4)
    assert replace(TINY, lr=1e-3, batch=16, base_batch=4).effective_lr == pytest.approx(2e-3)
    assert TINY.effective_lr == TINY.lr
