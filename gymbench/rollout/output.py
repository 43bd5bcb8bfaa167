"""Writing rollouts, and resuming from what an earlier (possibly killed) run wrote.

Each row is written as its rollout completes and reaches the file (the kernel's page cache) within
:data:`FLUSH_AFTER_S`, so a run killed at any moment loses at most the rollouts in flight and those
that landed in its last fraction of a second, which a resume redoes. On resume the file is read
back: completed (task_index, rollout_index) pairs are skipped; failed ones are attempted again
while their attempt count is below the cap; a truncated last line (the kill landed mid-write) is
dropped. When anything must go, the kept rows are rewritten to a temporary file that atomically
replaces the output, so each pair has at most one row and nothing completed is ever lost.

Rows another tool wrote (NeMo Gym's ``_ng_task_index``/``_ng_rollout_index``, or gymbench's index
names without a ``status``) are kept as done and counted, never silently deleted and redone.
"""

from __future__ import annotations

import asyncio
import os
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gymbench.errors import GymbenchError
from gymbench.jsonio import AtomicFile, dumps
from gymbench.rollout.dataset import MAX_REPEATS, ROLLOUT_INDEX_BITS
from gymbench.rollouts_file import RolloutLine, RolloutsFile
from gymbench.secrets import redact_bytes

_MOVE_AWAY = "point +output_jsonl_fpath at a new file or move this one away"
FLUSH_AFTER_S = 0.05
"""How long a written row may wait in the writer's buffer. Flushing at the end of every event-loop
turn instead cost one system call per one or two rows at parallelism 64 against a fast server,
about 13 µs of client CPU per rollout (issue 38's driver overhead bench, a tenth of the whole)."""


@dataclass
class ResumeState:
    done: set[int] = field(default_factory=set)
    """Pairs with a successful row, or failed ones that used up their attempts."""
    attempts: dict[int, int] = field(default_factory=dict)
    """Attempts already spent on pairs that failed and will be tried again."""
    kept_rows: int = 0
    dropped_truncated: bool = False
    dropped_failed: int = 0
    foreign_rows: int = 0
    """Rows with indices but no ``status`` (another tool, e.g. NeMo Gym, wrote them): kept as done."""
    duplicate_rows: int = 0
    """Further rows for a pair already done; not counted as kept (a rewrite leaves them out)."""


def pair_key(task_index: int, rollout_index: int) -> int:
    """One int per pair: a million done pairs then cost tens of MB, not hundreds."""
    return (task_index << ROLLOUT_INDEX_BITS) | rollout_index


def load_resume_state(path: Path, max_attempts: int, failures: Path | None = None) -> ResumeState:
    """Read an existing output file (streamed) and rewrite it when rows must be dropped.

    ``failures``: the run's failures sidecar (a run through NeMo Gym agents), whose rows are the
    failed attempts of the pairs the output lacks; read after the output, see :func:`_count_failures`."""
    state = ResumeState()
    if path.exists():
        earlier = _earlier_rollouts(path)
        for line in earlier.lines(on_cut="skip"):
            if _classify(path, line, state, max_attempts) == "keep":
                state.kept_rows += 1
        state.dropped_truncated = earlier.cut
        if state.dropped_truncated or state.dropped_failed:
            _rewrite_kept(path, max_attempts)
    if failures is not None and failures.exists():
        _count_failures(failures, state, max_attempts)
    return state


def _count_failures(path: Path, state: ResumeState, max_attempts: int) -> None:
    """Every pair not in the output is run again, as NeMo Gym 0.7.0 resumes, unless its failed
    attempts in the sidecar reached ``max_attempts`` (as a failed row in the output would have).
    The sidecar is only appended to: a last line cut short is dropped so the next row starts whole."""
    earlier = _earlier_rollouts(path)
    for line in earlier.lines(on_cut="skip"):
        key = pair_key(*read_pair(path, line.number, line.row))
        if key in state.done:
            continue
        attempt = max(_attempt(path, line.number, line.row), state.attempts.get(key, 0))
        state.attempts[key] = attempt
    for key, attempt in list(state.attempts.items()):
        if attempt >= max_attempts:
            state.done.add(key)
            del state.attempts[key]
    if earlier.cut:
        state.dropped_truncated = True
        then = "; the earlier failures are unchanged. Fix that (disk space, permissions) and resume again"
        with AtomicFile(path, then=then) as target:
            for line in _earlier_rollouts(path).lines(on_cut="skip"):
                target.write(line.raw)


def _earlier_rollouts(path: Path) -> RolloutsFile:
    return RolloutsFile(
        path,
        what="gymbench rollout row",
        then=f", so the file cannot be resumed; {_MOVE_AWAY}",
        if_unreadable=f"; {_MOVE_AWAY}",
    )


def _classify(path: Path, line: RolloutLine, state: ResumeState, max_attempts: int) -> str:
    """Decide one row's fate: keep, retry (dropped; attempted again), or skip (a duplicate)."""
    row, number = line.row, line.number
    key = pair_key(*read_pair(path, number, row))
    if key in state.done:
        state.duplicate_rows += 1
        return "skip"
    if "status" not in row:
        state.foreign_rows += 1
    elif row["status"] != "ok" and (attempt := _attempt(path, number, row)) < max_attempts:
        state.attempts[key] = max(attempt, state.attempts.get(key, 0))
        state.dropped_failed += 1
        return "retry"
    state.done.add(key)
    state.attempts.pop(key, None)
    return "keep"


TASK_INDEX_NAMES = ("task_index", "_ng_task_index")
ROLLOUT_INDEX_NAMES = ("rollout_index", "_ng_rollout_index")
"""A row's indices under gymbench's name and NeMo Gym's; gymbench writes both, NeMo Gym the second."""


def read_pair(path: Path, number: int, row: Mapping[str, Any]) -> tuple[int, int]:
    """A rollout row's (task, rollout) pair, from either tool's fields; ``path:number`` names it in errors.

    Resume and the tools that join rollout files read pairs through here, so a file NeMo Gym
    wrote and one gymbench wrote are read alike."""
    return (
        _index(path, number, row, TASK_INDEX_NAMES, None),
        _index(path, number, row, ROLLOUT_INDEX_NAMES, MAX_REPEATS),
    )


def _index(path: Path, number: int, row: Mapping[str, Any], names: tuple[str, str], limit: int | None) -> int:
    """The index under either name, checked to be a usable int (and the same under both)."""
    present = [name for name in names if name in row]
    if not present:
        raise GymbenchError(
            f"{path}:{number}: not a gymbench rollout row (no {names[0]} or {names[1]}), "
            f"so the file cannot be resumed; {_MOVE_AWAY}"
        )
    for name in present:
        value = row[name]
        if type(value) is not int or value < 0 or (limit is not None and value >= limit):
            bound = "0 or more" if limit is None else f"from 0 to {limit - 1}"
            raise GymbenchError(
                f"{path}:{number}: {name} must be a whole number {bound}, got {reprlib.repr(value)}; "
                f"fix or remove the row, or {_MOVE_AWAY}"
            )
    if len(present) == 2 and row[names[0]] != row[names[1]]:
        raise GymbenchError(
            f"{path}:{number}: {names[0]} ({row[names[0]]}) and {names[1]} ({row[names[1]]}) disagree, so the row "
            f"belongs to no single rollout; fix or remove the row, or {_MOVE_AWAY}"
        )
    return row[present[0]]


def _attempt(path: Path, number: int, row: dict[str, Any]) -> int:
    value = row.get("attempt", 1)
    if type(value) is not int or value < 1:
        raise GymbenchError(
            f"{path}:{number}: attempt must be a whole number 1 or more, got {reprlib.repr(value)}; "
            f"fix or remove the row, or {_MOVE_AWAY}"
        )
    return value


def _rewrite_kept(path: Path, max_attempts: int) -> None:
    """Copy the kept lines to a temporary file and atomically replace the output with it.

    The second pass replays the same decisions on a fresh state, so it keeps exactly the rows the
    first pass counted, without holding them in memory.
    """
    replay = ResumeState()
    then = "; the earlier rollouts are unchanged. Fix that (disk space, permissions) and resume again"
    with AtomicFile(path, then=then) as target:
        for line in _earlier_rollouts(path).lines(on_cut="skip"):
            if _classify(path, line, replay, max_attempts) == "keep":
                target.write(line.raw)


class RolloutWriter:
    """Appends one JSON line per rollout; the rows given are written and flushed together
    :data:`FLUSH_AFTER_S` after the first since the last flush (one system call for all the rows
    of that time, not one per row or per event-loop turn).

    Rows are encoded exactly (integers past 64 bits, lone surrogates) and redacted, so an API key
    a server echoed never reaches the file. The redaction scans the rows of a flush in one pass:
    each row ends with ``}\\n`` and starts with ``{``, so no pattern matches across two rows and
    the batch holds a match exactly when one of its rows does; a batch with one is redacted row by
    row, so each row is what redacting it alone gives. A write error is a :class:`GymbenchError`
    naming the file; one met by the timed flush (a loop callback, whose exceptions the loop only
    logs) is raised by the next ``write`` or by ``close``. After the first error nothing more is
    written.

    A full disk can stop a flush part-way through a row. The file is then always a prefix of the
    rows given, so :meth:`lost` (after :meth:`close`) tells exactly which rows are not whole in
    it: those a resume redoes (it drops a last line cut short).
    """

    def __init__(self, path: Path, append: bool) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle: IO[bytes] = open(path, "ab" if append else "wb")  # noqa: SIM115
            self._end = self._handle.tell()
        except OSError as exc:
            raise self._error(exc) from None
        self._flush_scheduled = False
        self._failure: GymbenchError | None = None
        self._rows: list[bytes] = []
        self._pairs: list[tuple[int, int]] = []
        """The encoded rows given since the last flush, and their (task, rollout) pairs."""
        self._unflushed: list[tuple[int, list[bytes], list[tuple[int, int]]]] = []
        """(start offset, rows, pairs) of each batch handed to the file whose flush has not succeeded."""
        self.rows_written = 0

    def _error(self, exc: OSError) -> GymbenchError:
        return GymbenchError(
            f"{self.path}: cannot write rollouts ({exc.strerror or exc}); check free space and permissions, "
            "or choose another +output_jsonl_fpath"
        )

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def write(self, row: dict[str, Any]) -> None:
        if self._failure is not None:
            raise self._failure
        self._rows.append(dumps(row, newline=True))
        self._pairs.append((row.get("task_index", -1), row.get("rollout_index", -1)))
        self.rows_written += 1
        if self._flush_scheduled:
            return
        try:
            asyncio.get_running_loop().call_later(FLUSH_AFTER_S, self.flush)
            self._flush_scheduled = True
        except RuntimeError:  # no event loop: flush now
            self.flush()
            self._raise_failure()

    def flush(self) -> None:
        """Redact the rows given since the last flush, and write and flush them in one call."""
        self._flush_scheduled = False
        if self._handle.closed or self._failure is not None:
            return
        rows, pairs = self._rows, self._pairs
        if rows:
            self._rows, self._pairs = [], []
            data = b"".join(rows)
            if redact_bytes(data) is not data:  # something to remove: row by row, as each alone
                rows = [redact_bytes(row) for row in rows]
                data = b"".join(rows)
            self._unflushed.append((self._end, rows, pairs))
            self._end += len(data)
        try:
            if rows:
                self._handle.write(data)
            self._handle.flush()
        except OSError as exc:
            self._failure = self._error(exc)
        else:
            self._unflushed.clear()

    def close(self) -> None:
        if not self._handle.closed:
            self.flush()
            try:
                self._handle.close()  # flushes what is left, which may fit now
            except OSError as exc:
                self._failure = self._failure or self._error(exc)
            else:
                if self._failure is None:
                    self._unflushed.clear()
        self._raise_failure()

    def lost(self) -> list[tuple[int, int]]:
        """After :meth:`close`: the (task, rollout) pairs given to :meth:`write` whose rows are not
        whole in the file (none when every write succeeded)."""
        if not self._unflushed and not self._pairs:
            return []
        try:
            size = os.stat(self.path).st_size
        except OSError:
            size = 0
        found = []
        for start, rows, pairs in self._unflushed:
            end = start
            for row, pair in zip(rows, pairs, strict=True):
                end += len(row)
                if end > size:
                    found.append(pair)
        return found + self._pairs  # given but never handed to the file


def check_output_path(input_path: str | os.PathLike[str], output_path: str | os.PathLike[str]) -> None:
    """Refuse an output that would destroy the tasks or that cannot be created, before the run."""
    output = Path(output_path)
    try:
        output.exists()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte, a symlink loop
        reason = getattr(exc, "strerror", None) or exc
        raise GymbenchError(f"{output}: cannot use this path ({reason}); choose another +output_jsonl_fpath") from None
    if output.is_dir():
        raise GymbenchError(f"{output}: is a directory; +output_jsonl_fpath must name a file in it")
    if output.exists() and not output.is_file():
        raise GymbenchError(
            f"{output}: is not a regular file (a pipe or a device); rollouts, their run fingerprint and "
            "metrics are written beside a regular file. Choose another +output_jsonl_fpath"
        )
    blocker = next((p for p in output.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise GymbenchError(
            f"{output}: {blocker} is a file, so no directory can be created there; choose another +output_jsonl_fpath"
        )
    if _same_file(input_path, output):
        raise GymbenchError(
            f"{output}: is the input file {input_path} (the same file); writing rollouts there would destroy "
            "the tasks. Choose another +output_jsonl_fpath"
        )


def _same_file(first: str | os.PathLike[str], second: str | os.PathLike[str]) -> bool:
    """Also through a symlink or a hard link."""
    try:
        if os.path.samefile(first, second):
            return True
    except OSError:  # one of them does not exist (yet)
        pass
    return os.path.realpath(first) == os.path.realpath(second)


def refuse_to_overwrite(path: Path, failures: Path | None = None) -> None:
    """``failures``: the run's failures sidecar, refused alike (a run whose every rollout failed
    leaves an empty output beside it)."""
    for owned in (path, failures):
        if owned is not None:
            _refuse_existing(owned)


def _refuse_existing(path: Path) -> None:
    if path.exists() and path.stat().st_size > 0:
        raise GymbenchError(
            f"{path}: output file already exists. Add +resume=true to continue it, "
            "+overwrite=true to replace it, or choose another +output_jsonl_fpath"
        )
