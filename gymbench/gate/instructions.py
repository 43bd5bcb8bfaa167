"""``--gymbench-instructions``: count the instructions of a session's benchmarks under callgrind.

The session itself times its benchmarks as usual; afterwards one child session reruns the
benchmarks that measured synchronous calls under valgrind (about 50 times slower, so only
those, a warm-up call and five counted brackets each), with the settings that make counts
repeat (:data:`~gymbench.gate.callgrind.COUNTING_ENV`). The child writes one JSON line per
benchmark; the parent adds an ``instructions`` metric to each result. Without valgrind, or where
callgrind cannot count, the session says why in one line and records no such metric: never a 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from gymbench.fingerprint import valgrind_version
from gymbench.gate.callgrind import ALLOCATOR_HOW, COUNTING_ENV, callgrind_command
from gymbench.measure import INSTRUCTIONS_UNIT
from gymbench.record import BenchmarkResult, Metric
from gymbench.threads import THREADS_EXTRA, forced_note

COUNTS_FILE = "counts.jsonl"
NOTE_FILE = "note.txt"
CODE_FILE = "code.json"
INSTRUCTION_SAMPLES = 5
"""Counted brackets per benchmark, each after its own heap layout: enough for the comparison's
interval to see the allocator's share of the count, few because each is slow under callgrind."""
WORKER_OPTION = "--gymbench-instructions-worker"
COUNTS_EXTRA = "instructions"
"""The key in a benchmark's ``extra`` that says how (or why not) its instructions were counted."""
COUNTED_HOW = (
    f"counted under callgrind (the calling thread) with {ALLOCATOR_HOW}, BLAS/OpenMP forced to one thread "
    "(OPENBLAS_NUM_THREADS=1 and the like); these ran on one thread in the timed session, so forcing it "
    "changes nothing for them"
)
THREADS_WHERE = "in the timed session"
NOT_COUNTED_CHILD = "not counted: it failed, was skipped or ran out of time under callgrind"
NOT_COUNTED_ASYNC = "not counted: asyncio (ameasure awaits on an event loop, there is no call to bracket)"
START_UP_CPU_S = 7.0
"""CPU seconds callgrind spends importing pytest and gymbench's plugin before the first bracket."""
DEFAULT_TIMEOUT_S = 3600.0
"""How long the callgrind child may run (``--gymbench-instructions-timeout``) before it is stopped."""


def cost_line(benchmarks: int, brackets: int) -> str:
    """The cost, said before it is paid: a counted session under load took 10-53 min of wall."""
    return (
        f"gymbench: counting {benchmarks} benchmarks under callgrind: about {START_UP_CPU_S:g} s of CPU to import "
        "pytest and gymbench, plus the suite's own imports (with numpy: about 30 s in all, measured), "
        f"then {brackets + 1} rounds of each benchmark's calls (a warm-up, {brackets} counted brackets) at "
        "20-100x their normal CPU time (docs/baselines.md, 'Counting cost'); -k or a list of benchmarks "
        "counts fewer, --gymbench-instructions-brackets fewer rounds"
    )


def unavailable_note() -> str | None:
    """Why instructions cannot be counted on this machine, or ``None`` when they can."""
    if not sys.platform.startswith("linux"):
        return f"instruction counts not recorded: callgrind needs Linux, this is {sys.platform}"
    if valgrind_version() is None:
        return "instruction counts not recorded: valgrind is not installed (Debian/Ubuntu: apt-get install -y valgrind)"
    return None


@dataclass
class CountedBenchmarks:
    """What the child session counted, by benchmark id, and a note when something is missing."""

    metrics: dict[str, dict[str, Metric]] = field(default_factory=dict)
    note: str | None = None
    code: dict[str, str] | None = None
    """Where the child imported the checkout's packages from (:func:`write_code`)."""

    def merge_into(self, results: Sequence[BenchmarkResult]) -> list[BenchmarkResult]:
        """Every result says how it was counted, or why not (every verdict on counts lists it)."""
        return [self._merged(r) for r in results]

    def _merged(self, result: BenchmarkResult) -> BenchmarkResult:
        if result.id in self.metrics:
            helpers = int(result.extra.get(THREADS_EXTRA, 0))
            forced = f"counted under callgrind with {ALLOCATOR_HOW}; {forced_note(helpers, THREADS_WHERE)}"
            how = forced if helpers else COUNTED_HOW
        else:
            fallback = f"not counted ({self.note})" if self.note and not self.metrics else NOT_COUNTED_CHILD
            how = result.extra.get(COUNTS_EXTRA, fallback)
        return replace(result, metrics={**result.metrics, **self.metrics.get(result.id, {})},
                       extra={**result.extra, COUNTS_EXTRA: how})  # fmt: skip


def not_counted_reason(measured_sync: bool, measured_async: bool, marker: object) -> str:
    """Why a benchmark of a counted session is not counted, in the words every verdict shows."""
    if marker is False:
        return "not counted: marked @pytest.mark.gymbench(instructions=False)"
    if measured_async and not measured_sync:
        return NOT_COUNTED_ASYNC
    return "not counted: no gymbench.measure() call (its figures are recorded, not measured)"


def count_in_child(
    nodeids: Sequence[str], rootdir: Path, child_args: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S
) -> CountedBenchmarks:
    """Run ``nodeids`` once more, under callgrind, and read what they counted.

    A child still running after ``timeout_s`` is killed; what it counted until then is kept.
    """
    note = unavailable_note()
    if note is not None:
        return CountedBenchmarks(note=note)
    with tempfile.TemporaryDirectory(prefix="gymbench-callgrind-") as tmp:
        out_dir = Path(tmp)
        argv = [sys.executable, "-m", "pytest", *nodeids, "-q", "-p", "no:cacheprovider", "--rootdir", str(rootdir)]
        argv += [WORKER_OPTION, str(out_dir), *child_args]
        log = out_dir / "pytest.log"
        with log.open("w") as sink:
            child = subprocess.Popen(
                callgrind_command(out_dir, argv), cwd=rootdir, env={**os.environ, **COUNTING_ENV},
                stdout=sink, stderr=subprocess.STDOUT,
            )  # fmt: skip
            finished = _follow(child, out_dir / COUNTS_FILE, len(nodeids), timeout_s)
        found = _read_counts(out_dir, child.returncode, log, len(nodeids))
        if not finished:
            found.note = (
                f"instruction counts: callgrind stopped after {timeout_s:g} s (--gymbench-instructions-timeout) "
                f"with {len(found.metrics)} of {len(nodeids)} benchmarks counted; count fewer or allow longer"
            )
        return found


def _follow(child: subprocess.Popen[bytes], counts: Path, total: int, timeout_s: float) -> bool:
    """A progress bar over benchmarks counted while the (slow) child runs; ``False`` if it ran out of time."""
    from tqdm import tqdm

    deadline = time.monotonic() + timeout_s
    with tqdm(total=total, desc="gymbench: counting instructions under callgrind", unit="bench",
              file=sys.__stderr__, leave=False, disable=None) as bar:  # fmt: skip
        while child.poll() is None:
            if time.monotonic() > deadline:
                child.kill()
                child.wait()
                return False
            time.sleep(0.5)
            bar.update(_lines(counts) - bar.n)
    return True


def _lines(path: Path) -> int:
    try:
        return sum(1 for _ in path.open())
    except OSError:
        return 0


def _read_counts(out_dir: Path, returncode: int, log: Path, expected: int) -> CountedBenchmarks:
    found = CountedBenchmarks()
    if (out_dir / COUNTS_FILE).exists():
        for line in (out_dir / COUNTS_FILE).read_text().splitlines():
            entry = json.loads(line)
            found.metrics[entry["id"]] = {name: Metric.from_dict(m) for name, m in entry["metrics"].items()}
    if (out_dir / CODE_FILE).exists():
        found.code = json.loads((out_dir / CODE_FILE).read_text())["imported"]
    if (out_dir / NOTE_FILE).exists():
        found.note = (out_dir / NOTE_FILE).read_text().strip()
    elif returncode not in (0, 1) or not found.metrics:
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        found.note = f"instruction counts not recorded: pytest under callgrind exited {returncode} ({tail})"
    elif len(found.metrics) < expected:
        found.note = (
            f"instruction counts recorded for {len(found.metrics)} of {expected} benchmarks: "
            "the others failed or skipped under callgrind"
        )
    return found


def write_counts(out_dir: Path, result: BenchmarkResult) -> None:
    """The child's side: one JSON line per benchmark that counted something."""
    counted = {name: m.to_dict() for name, m in result.metrics.items() if m.unit == INSTRUCTIONS_UNIT}
    if counted:
        with (out_dir / COUNTS_FILE).open("a") as sink:
            sink.write(json.dumps({"id": result.id, "metrics": counted}) + "\n")


def write_note(out_dir: Path, note: str) -> None:
    (out_dir / NOTE_FILE).write_text(note + "\n")


def write_code(out_dir: Path, root: Path) -> None:
    """The child's side: which code it counted, so the record proves it was the checkout's own."""
    from gymbench.gate.measured_code import measured_code

    (out_dir / CODE_FILE).write_text(json.dumps(measured_code(root)) + "\n")
