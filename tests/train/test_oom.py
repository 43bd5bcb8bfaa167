"""OOM recognition, the search strategy, and real capped trials in subprocesses."""

from __future__ import annotations

import math
import os
from dataclasses import replace

import pytest
import torch

from gymbench import GymbenchError
from gymbench.train import backoff
from gymbench.train.backoff import cpu_trials, cuda_budget, find_largest_batch, halve_until_it_fits
from gymbench.train.config import DEFAULT_MARGIN, TrainConfig
from gymbench.train.memory import SHARP_MALLOC_ENV, proc_status_bytes
from gymbench.train.oom import SearchPlan, Trial, attempt, is_out_of_memory, largest_batch_that_fits
from gymbench.train.session import TrainSession
from gymbench.train.summary import search_lines
from gymbench.train.worker import WorkerJob, _try, child_environment
from tests.train.models_for_tests import build_tiny_mlp

MiB = 1 << 20
CONFIG = TrainConfig(model="mlp", model_config={"width": 256, "depth": 2}, batch=1, threads=1)


def test_a_real_allocator_failure_is_an_oom_and_other_errors_propagate() -> None:
    message = attempt(lambda: torch.empty(1 << 50, dtype=torch.uint8))
    assert message is not None and "DefaultCPUAllocator: can't allocate memory" in message
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(RuntimeError("could not create a primitive"))  # oneDNN under RLIMIT_AS
    assert not is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    with pytest.raises(ValueError, match="not memory"):
        attempt(lambda: (_ for _ in ()).throw(ValueError("not memory")))
    assert attempt(lambda: torch.ones(4)) is None


class Threshold:
    """A device whose memory holds exactly ``largest`` samples: the search logic on its own."""

    def __init__(self, largest: int) -> None:
        self.largest = largest
        self.calls: list[int] = []

    def __call__(self, batch: int, purpose: str) -> Trial:
        self.calls.append(batch)
        fits = batch <= self.largest
        return Trial(batch, fits, (50 + batch) * MiB if fits else 0, purpose=purpose)


@pytest.mark.parametrize("largest", [1, 7, 100, 1301, 50_000])
@pytest.mark.parametrize("guided", [True, False])
def test_search_brackets_the_true_size_within_tolerance(largest: int, guided: bool) -> None:
    device = Threshold(largest)
    plan = SearchPlan(budget_bytes=(50 + largest) * MiB, guided=guided)
    result = largest_batch_that_fits(device, plan)
    assert largest * 0.97 <= result.largest_fit <= largest
    assert result.first_failure is not None and result.first_failure > largest
    assert result.search_trials <= math.log2(largest) + 8
    assert result.chosen <= max(1, math.floor(result.largest_fit * (1 - DEFAULT_MARGIN))) and result.pass_rate == 1.0
    if guided:  # the memory line puts the size exactly where the margin of the budget is left
        left = (1 - DEFAULT_MARGIN) * (50 + largest)
        assert (50 + result.chosen) <= left < (51 + result.chosen) or result.chosen == 1


def test_guided_search_never_probes_past_its_own_prediction() -> None:
    """1 and 8 fit; their memory predicts 9, which fits; the prediction (9) now says 9 is the answer,
    so the search confirms 10 fails instead of trying 72, a size the prediction says cannot fit."""
    device = Threshold(9)
    result = largest_batch_that_fits(device, SearchPlan(budget_bytes=(50 + 9) * MiB, verify_runs=0))
    assert device.calls == [1, 8, 9, 10]
    assert (result.largest_fit, result.first_failure) == (9, 10)


class Flaky(Threshold):
    """Fits up to ``largest`` once, but only up to ``steady`` every time: a noisy boundary."""

    def __init__(self, largest: int, steady: int) -> None:
        super().__init__(largest)
        self.steady = steady

    def __call__(self, batch: int, purpose: str) -> Trial:
        trial = super().__call__(batch, purpose)
        return Trial(batch, batch <= self.steady, purpose=purpose) if purpose == "verify" else trial


def test_a_failed_verification_backs_off_until_the_size_verifies() -> None:
    result = largest_batch_that_fits(Flaky(100, 85), SearchPlan(verify_runs=3, margin=0.05))
    assert result.largest_fit == 99  # within the 3% tolerance; 5% below it is 94
    assert [t.batch for t in result.verification] == [94, 89, 84, 84, 84]
    assert (result.chosen, result.pass_rate, result.backoffs) == (84, 1.0, 2)
    assert result.to_dict()["backoffs"] == 2
    assert result.headroom is None  # this device reports no memory for verification runs


def test_the_chosen_size_leaves_the_margin_of_the_budget_not_only_of_the_batch() -> None:
    """50 MiB fixed and 1 MiB a sample in 150 MiB: 5% fewer samples (95) leave 3.3% of the budget, which
    a process whose footprint is a few percent larger does not have; the size that leaves 5% is 92."""
    result = largest_batch_that_fits(Threshold(100), SearchPlan(budget_bytes=(50 + 100) * MiB, margin=0.05))
    assert [t.batch for t in result.verification] == [95, 92, 92, 92]
    assert result.chosen == 92 and result.headroom == pytest.approx(1 - 142 / 150) and result.backoffs == 1
    lines = search_lines(result, TrainConfig(), "")
    assert any("verification used 142-142 MiB of the 150 MiB budget: 5.3% left" in line for line in lines)
    assert any("from 95 (under the margin left)" in line for line in lines)
    assert any("passed in fresh processes" in line for line in lines)


def test_backing_off_is_bounded_and_the_pass_rate_stays_honest() -> None:
    result = largest_batch_that_fits(Flaky(100, 10), SearchPlan(verify_runs=3, max_backoffs=1, margin=0.05))
    assert [t.batch for t in result.verification] == [94, 89]
    assert result.chosen == 89 and result.pass_rate == 0.0


def test_search_reports_when_nothing_fits() -> None:
    with pytest.raises(GymbenchError, match="even batch 4 does not fit"):
        largest_batch_that_fits(Threshold(2), SearchPlan(start=4))


def test_search_stops_at_max_batch() -> None:
    result = largest_batch_that_fits(Threshold(10**9), SearchPlan(max_batch=100, verify_runs=0))
    assert result.largest_fit == 100 and result.first_failure is None


def test_capped_subprocess_trials_fit_small_and_oom_large() -> None:
    try_batch = cpu_trials(build_tiny_mlp, CONFIG, budget_bytes=64 * MiB, steps=1)
    small, huge = try_batch(2, "search"), try_batch(200_000, "search")
    assert small.fits and small.error is None
    assert not huge.fits and "can't allocate memory" in (huge.error or "")


def test_halving_in_one_process_settles_below_the_cap() -> None:
    trials = halve_until_it_fits(build_tiny_mlp, replace(CONFIG, batch=200_000), 64 * MiB)
    assert [t.fits for t in trials][-1] and not any(t.fits for t in trials[:-1])
    assert [t.batch for t in trials][:2] == [200_000, 100_000]


def test_trials_in_one_process_report_their_own_memory_not_the_running_peak() -> None:
    session = TrainSession(build_tiny_mlp, CONFIG)
    session.step()
    baseline = proc_status_bytes("VmSize")
    large = _try(session, 4096, 1, baseline, proc_status_bytes("VmPeak"), "halve")
    small = _try(session, 64, 1, baseline, proc_status_bytes("VmPeak"), "halve")
    assert large.fits and small.fits
    assert large.rss_bytes > 4 * MiB  # 4096 x 256 floats, several activations per block
    assert small.rss_bytes < large.rss_bytes / 4
    assert small.used_bytes == 0  # no new address-space peak: its own use is unknown, not the old peak


def test_trials_run_under_the_allocator_a_user_process_has_unless_asked() -> None:
    memory = child_environment(WorkerJob("memory", build_tiny_mlp, CONFIG))
    default = child_environment(WorkerJob("trial", build_tiny_mlp, CONFIG))
    fixed = child_environment(WorkerJob("trial", build_tiny_mlp, CONFIG, allocator="fixed"))
    for name, value in SHARP_MALLOC_ENV.items():
        assert memory[name] == value and fixed[name] == value
        assert default.get(name) == os.environ.get(name)


def test_a_search_says_which_allocator_its_trials_ran_under() -> None:
    plan = SearchPlan(start=8, max_batch=8, budget_bytes=64 * MiB, verify_runs=1)
    result = find_largest_batch(build_tiny_mlp, CONFIG, plan, steps=1)
    assert result.largest_fit == 8 and result.pass_rate == 1.0
    assert result.allocator.startswith("the default allocator settings a user's training process has")
    assert result.to_dict()["allocator"] == result.allocator


@pytest.mark.slow
def test_real_search_verifies_its_choice() -> None:
    plan = SearchPlan(start=16, budget_bytes=64 * MiB, tolerance=0.2, verify_runs=1)
    result = find_largest_batch(build_tiny_mlp, CONFIG, plan, steps=1)
    assert result.first_failure is not None and result.largest_fit < result.first_failure
    assert result.pass_rate == 1.0


@pytest.mark.parametrize(
    "message",
    [
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "cuDNN error: CUDNN_STATUS_NOT_ENOUGH_WORKSPACE",
    ],
)
def test_cublas_and_cudnn_allocation_failures_are_out_of_memory(message: str) -> None:
    assert is_out_of_memory(RuntimeError(message))
    assert attempt(lambda: (_ for _ in ()).throw(RuntimeError(message))) == message


GiB = 1 << 30


class FakeCuda:
    """torch.cuda's memory calls on a CPU: an 80 GiB GPU whose context and other processes hold
    ``outside`` bytes, and the fractions the search sets."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, outside: int) -> None:
        self.fractions: list[float] = []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80 * GiB - outside, 80 * GiB))
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
        set_fraction = lambda f, device=None: self.fractions.append(f)  # noqa: E731
        monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", set_fraction)


def test_the_cuda_cap_leaves_out_the_context_other_processes_and_a_colocated_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cuda = FakeCuda(monkeypatch, outside=2 * GiB)
    budget = cuda_budget(torch.device("cuda", 0), memory_fraction=0.9, colocated_share=0.6)
    assert (budget.outside, budget.colocated) == (2 * GiB, int(0.6 * 80 * GiB))
    assert budget.allowed == int(0.9 * 80 * GiB) - 2 * GiB - int(0.6 * 80 * GiB)  # 22 GiB, not 72
    assert "2.00 GiB in use outside it" in budget.words() and cuda.fractions == []
    with pytest.raises(GymbenchError, match="no GPU memory left to search in"):
        cuda_budget(torch.device("cuda", 0), memory_fraction=0.6, colocated_share=0.59)


def test_the_cuda_search_caps_trials_by_that_budget_and_says_they_shared_a_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cuda = FakeCuda(monkeypatch, outside=8 * GiB)
    seen: list[int] = []

    def trials(factory: object, config: TrainConfig, steps: int) -> Threshold:
        return Threshold(100)

    monkeypatch.setattr(backoff, "cuda_trials", trials)
    monkeypatch.setattr(backoff, "search", lambda try_batch, plan, progress: seen.append(plan.budget_bytes) or
                        largest_batch_that_fits(try_batch, replace(plan, budget_bytes=150 * MiB)))  # fmt: skip
    result = find_largest_batch(build_tiny_mlp, replace(CONFIG, device="cuda"), SearchPlan(), memory_fraction=0.5)
    assert seen == [40 * GiB - 8 * GiB]
    assert cuda.fractions == [pytest.approx(32 / 80), 1.0]  # the cap, then lifted
    lines = search_lines(result, CONFIG, "")
    assert any("passed in this process (CUDA trials share it" in line for line in lines)
    assert not any("fresh processes" in line for line in lines)
