"""``gymbench merge-rollouts a.jsonl b.jsonl ... -o all.jsonl``: NeMo Gym's manual splits joined with a check.

NeMo Gym's tuning guide splits a big collection across machines with ``start_idx``/``end_idx``
and joins the files with ``cat``; this joins them and refuses duplicates and (given the tasks
file) gaps.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gymbench.errors import GymbenchError
from gymbench.rollout.run_settings import TaskRange
from gymbench.settings import OutputFile, doc, with_defaults

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


@dataclass
class MergeSettings(TaskRange, OutputFile):
    """The task range (``--input`` given) is the whole selection the splits were collected from."""

    files: list[str] = field(default_factory=list, metadata=doc("the rollouts files, in order", positional=True))
    input: str | None = field(
        default=None, metadata=doc("the tasks file the splits came from: check that no pair is missing", path=True)
    )
    overwrite: bool = field(default=False, metadata=doc("replace an existing output file"))
    force: bool = field(
        default=False,
        metadata=doc("merge parts whose .run.json says they were collected with other settings or tasks"),
    )


MergeSettings = with_defaults(MergeSettings, {"output": "the merged file (required)"})  # type: ignore[misc]


def configure(parser: argparse.ArgumentParser) -> None:
    from gymbench.settings import add_settings_arguments

    parser.usage = "gymbench merge-rollouts FILE [FILE ...] -o MERGED [--input TASKS --num-repeats N] [+key=value ...]"
    parser.epilog = "example: gymbench merge-rollouts part0.jsonl part1.jsonl -o all.jsonl --input tasks.jsonl"
    add_settings_arguments(parser, MergeSettings)


def run(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.settings import settings_from_args

    return merge_command(settings_from_args(MergeSettings, args))


def merge_command(settings: MergeSettings) -> int:
    from gymbench.collect.output_lock import output_lock

    if settings.output is None:
        raise GymbenchError("merge-rollouts needs -o MERGED.jsonl")
    output = Path(settings.output)
    with output_lock(output, "-o"), _terminated_as_exit(output):
        return _merge(settings, output)


@contextlib.contextmanager
def _terminated_as_exit(output: Path) -> Iterator[None]:
    """SIGTERM (``kill``, a cancelled CI job) leaves the merge as an exception does: the partial
    temporary file is removed and ``output`` stays as it was (a SIGKILL's is removed by the next run)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        print(f"gymbench: terminated; nothing was written to {output} and the files merged are unchanged",
              file=sys.stderr)  # fmt: skip
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _merge(settings: MergeSettings, output: Path) -> int:
    from gymbench.collect.merge import Expected, check_parts_alike, merge_rollouts
    from gymbench.jsonio import refuse_inputs

    refuse_inputs(output, [*settings.files, settings.input])  # before --overwrite is even considered
    if output.is_file() and output.stat().st_size and not settings.overwrite:
        raise GymbenchError(f"{output}: already exists; add --overwrite to replace it, or choose another -o")
    sources = [Path(name) for name in settings.files]
    for note in check_parts_alike(sources, settings.input, settings.force):
        print(f"gymbench: note: {note}", file=sys.stderr)
    expected = None
    if settings.input is not None:
        expected = Expected.from_input(settings.input, settings.task_slice())
    report = merge_rollouts(sources, output, expected)
    checked = "checked against the tasks: none missing, " if expected is not None else ""
    print(
        f"merged {report.rows} rows from {len(settings.files)} files into {output} ({checked}no duplicates)"
        + (f"; {report.failed_rows} rows are failed rollouts" if report.failed_rows else ""),
        file=sys.stderr,
    )
    if expected is None:
        print("gymbench: note: without --input, gaps cannot be seen; only duplicates were checked", file=sys.stderr)
    return 0
