"""A ``torch.profiler`` trace of one training step, on request (it slows the step down).

The step runs inside a ``gymbench_train_step`` range and each phase inside a range of its own
name (``forward``, ``backward``, ``optimizer``; for the RL step NeMo RL's
``policy_and_reference_logprobs``, ``policy_training`` ...), so the trace shows where time went.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from torch.profiler import ProfilerActivity, profile, record_function

from gymbench.errors import GymbenchError
from gymbench.train.session import TrainSession


class PhaseRanges:
    """A phase observer that opens a ``record_function`` range per phase."""

    def start(self) -> None:
        return None

    def phase(self, name: str) -> contextlib.AbstractContextManager[object]:
        return record_function(name)

    def mark(self, event: str) -> None:
        return None


def trace_one_step(session: TrainSession, path: str | Path) -> tuple[Path, str]:
    """Write a Chrome trace (open in Perfetto or chrome://tracing); return it and the top ops."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GymbenchError(f"cannot write the profiler trace to {target}: {exc}") from None
    activities = [ProfilerActivity.CPU]
    if session.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, profile_memory=True) as prof:
        with record_function("gymbench_train_step"):
            session.step(PhaseRanges())
        session.synchronize()
    prof.export_chrome_trace(str(target))
    sort_by = "cuda_time_total" if session.device.type == "cuda" else "cpu_time_total"
    return target, prof.key_averages().table(sort_by=sort_by, row_limit=10)
