"""The sessions a gymbench pytest session starts, or is: the callgrind child and the A/B worker.

Kept out of :mod:`gymbench.pytest.plugin` (which loads in every pytest run) and imported only
when ``--gymbench-instructions``, ``--gymbench-instructions-worker`` or ``--gymbench-ab-worker``
is given.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gymbench.gate.ab.worker import WorkerLink
from gymbench.gate.callgrind import CountingUnavailable, InstructionCounter
from gymbench.gate.instructions import cost_line, count_in_child, write_note
from gymbench.record import BenchmarkResult

if TYPE_CHECKING:
    from gymbench.pytest.plugin import BenchSession


def become_worker(config: pytest.Config, bench: BenchSession) -> None:
    """A child session measures for its parent: it never saves, compares or counts on its own."""
    bench.save_name = bench.compare = None
    bench.instructions = False
    count_dir = config.getoption("--gymbench-instructions-worker")
    if count_dir:
        bench.count_dir = Path(count_dir)
        bench.counter = InstructionCounter(bench.count_dir, config.getoption("--gymbench-instructions-brackets"))
        try:
            bench.counter.prepare()
        except CountingUnavailable as exc:
            write_note(bench.count_dir, f"instruction counts not recorded: {exc}")
            pytest.exit("callgrind cannot count here", returncode=0)
    if config.getoption("--gymbench-ab-worker"):
        bench.ab_link = WorkerLink.from_environment()
        config.pluginmanager.register(bench.ab_link, "gymbench-ab-worker")


def count_instructions(config: pytest.Config, bench: BenchSession) -> list[BenchmarkResult]:
    """Rerun the timed benchmarks under callgrind and add their ``instructions`` metric."""
    if not bench.to_count:
        bench.instructions_note = "instruction counts: no benchmark here measures synchronous calls to count"
        return bench.results
    child_args = ["--gymbench-quick"] if bench.settings.quick else []
    brackets = config.getoption("--gymbench-instructions-brackets")
    child_args += ["--gymbench-instructions-brackets", str(brackets)]
    print(cost_line(len(bench.to_count), brackets), file=sys.__stderr__, flush=True)
    timeout_s = config.getoption("--gymbench-instructions-timeout")
    counted = count_in_child(bench.to_count, config.rootpath, child_args, timeout_s)
    bench.instructions_note = counted.note
    bench.counted_code = counted.code
    return counted.merge_into(bench.results)
