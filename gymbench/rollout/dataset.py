"""Reading tasks: streamed JSONL rows in NeMo Gym's shape, sliced, limited and repeated.

Rows are read one line at a time, so memory does not grow with the file. ``task_index`` is the
row's 0-based position among the file's non-blank lines, so runs that split one file with
``start_idx`` and ``end_idx`` (the half-open range ``[start_idx, end_idx)``) produce globally unique
indices.

The input may be a pipe (``/dev/stdin``, ``<(...)``, a FIFO). A pipe can be read only once, so
:func:`open_tasks` opens the input exactly once, validates the first selected row before the run
starts and hands that same row back first when iterated. Whatever needs a second pass (the
progress bar's total, resume's identity check) asks :func:`check_input_file` first.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any

from gymbench.errors import GymbenchError
from gymbench.jsonio import JSONReadError, capped_lines, decode_line, endless_device, loads, quick_loads

ROLLOUT_INDEX_BITS = 24
"""``output.pair_key`` packs a rollout index in this many bits (a million done pairs stay small)."""
MAX_REPEATS = 1 << ROLLOUT_INDEX_BITS
_BOM = b"\xef\xbb\xbf"


class DatasetError(GymbenchError):
    """An input row that cannot become a task; the message names file and line."""


class InputUnreadable(DatasetError):
    """The tasks file at ``path`` cannot be read (``problem`` says why). How a setting is spelt is
    the command's business (``collect`` takes ``+input_jsonl_fpath=PATH``, ``merge-rollouts``
    ``--input PATH``), so the message names no flag; a command names its own through
    :func:`input_named_by`."""

    def __init__(
        self, path: str | os.PathLike[str], problem: str, advice: str = "it must be a JSONL file of tasks"
    ) -> None:
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}; {advice}")

    def naming(self, flag: str) -> DatasetError:
        return DatasetError(f"{self.path}: {self.problem}; pass {flag} to a JSONL file of tasks")


class InputNotFound(InputUnreadable):
    """No tasks file at ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, "input file not found")


@contextlib.contextmanager
def input_named_by(flag: str) -> Iterator[None]:
    """Within the block, a missing tasks file is reported with ``flag``, the command's spelling."""
    try:
        yield
    except InputUnreadable as exc:
        raise exc.naming(flag) from None


@dataclass(frozen=True)
class TaskSlice:
    start_idx: int = 0
    end_idx: int | None = None
    limit: int | None = None
    num_repeats: int = 1

    def __post_init__(self) -> None:
        if self.start_idx < 0:
            raise GymbenchError(f"start_idx must be 0 or more, got {self.start_idx}")
        if self.end_idx is not None and self.end_idx < self.start_idx:
            raise GymbenchError(
                f"start_idx ({self.start_idx}) is after end_idx ({self.end_idx}); the range is "
                "[start_idx, end_idx), so end_idx must be at least start_idx"
            )
        if self.limit is not None and self.limit < 0:
            raise GymbenchError(f"limit must be 0 or more, got {self.limit}")
        if self.num_repeats < 1:
            raise GymbenchError(f"num_repeats must be at least 1, got {self.num_repeats}")
        if self.num_repeats > MAX_REPEATS:
            raise GymbenchError(
                f"num_repeats must be at most {MAX_REPEATS} (rollout indices have {ROLLOUT_INDEX_BITS} bits), "
                f"got {self.num_repeats}"
            )

    @property
    def stop(self) -> int | None:
        """One past the last row index taken, from end_idx and limit together."""
        ends = [e for e in (self.end_idx, None if self.limit is None else self.start_idx + self.limit) if e is not None]
        return min(ends) if ends else None


@dataclass(frozen=True)
class Task:
    task_index: int
    rollout_index: int
    row: Mapping[str, Any]


# --- the input as a file system object ---------------------------------------------------------


def check_input_file(path: str | os.PathLike[str]) -> bool:
    """Refuse a missing input, a directory, or an empty regular file; True when it is a regular file.

    A pipe always looks empty to ``stat`` (size 0), so its emptiness is found only by reading it.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputNotFound(path) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        reason = getattr(exc, "strerror", None) or exc
        raise InputUnreadable(path, f"cannot read the input ({reason})", "check the path") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputUnreadable(path, "is a directory", "pass a JSONL file of tasks")
    if endless_device(path):  # /dev/zero never ends
        raise InputUnreadable(path, "is a device, not a file of tasks", "pass a JSONL file (or a pipe)")
    regular = stat.S_ISREG(info.st_mode)
    if regular and info.st_size == 0:
        raise DatasetError(f"{path}: input file is empty; it needs one JSON task per line")
    return regular


def check_resumable_input(path: str | os.PathLike[str]) -> None:
    """Resume must prove the input is the one the earlier run read, which takes a pass of its own."""
    if not check_input_file(path):
        raise DatasetError(
            f"{path}: input is a pipe, so +resume=true cannot re-read it; write the tasks to a file first"
        )


def _open_input(path: str | os.PathLike[str]) -> IO[bytes]:
    try:
        return open(path, "rb")  # noqa: SIM115 - the caller owns and closes the handle
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the input ({exc.strerror or exc}); check the path") from None


# --- lines: one scanner for reading, counting and fingerprinting --------------------------------


def _is_blank(raw: bytes, first: bool) -> bool:
    line = raw.removeprefix(_BOM) if first else raw
    return not line or line.isspace()  # what ``not line.strip()`` says, without copying the line


class _SelectedLines:
    """The non-blank lines in ``[start_idx, stop)`` as ``(line_number, task_index, raw)``.

    Counting, fingerprinting and parsing all go through here, so they agree on which lines are
    rows (blank lines skipped, a first-line byte-order mark ignored) without parsing any JSON.
    """

    def __init__(self, handle: IO[bytes], selection: TaskSlice) -> None:
        self.handle = handle
        self.selection = selection
        self.any_bytes = False
        self.any_rows = False

    def __iter__(self) -> Iterator[tuple[int, int, bytes]]:
        stop = self.selection.stop
        index = -1
        lines = capped_lines(self.handle, getattr(self.handle, "name", "the input"))
        for line_number, raw in enumerate(lines, start=1):
            self.any_bytes = True
            if _is_blank(raw, line_number == 1):
                continue
            self.any_rows = True
            index += 1
            if stop is not None and index >= stop:
                return
            if index >= self.selection.start_idx:
                yield line_number, index, raw


# --- rows ----------------------------------------------------------------------------------------


def parse_row(path: str | os.PathLike[str], line_number: int, line: str) -> dict[str, Any]:
    """One task row, checked for NeMo Gym's shape (the ``path:line`` is formatted only for an error:
    this runs once per task)."""
    try:
        row = loads(line)
    except JSONReadError as exc:
        raise DatasetError(f"{path}:{line_number}: {exc}; fix or remove the line") from None
    return check_row(path, line_number, row)


def check_row(path: str | os.PathLike[str], line_number: int, row: Any) -> dict[str, Any]:
    """A parsed task row, checked for NeMo Gym's shape."""
    if not isinstance(row, dict):
        raise DatasetError(f"{path}:{line_number}: expected a JSON object per line, got {type(row).__name__}")
    params = row.get("responses_create_params")
    if not isinstance(params, dict):
        raise DatasetError(
            f"{path}:{line_number}: row has no 'responses_create_params' object; each row needs "
            '{"responses_create_params": {"input": ...}} as in NeMo Gym'
        )
    data = params.get("input")
    if not isinstance(data, (str, list)) or not data:
        raise DatasetError(
            f"{path}:{line_number}: responses_create_params.input must be a non-empty string or list of messages"
        )
    if isinstance(data, list) and not all(isinstance(item, dict) for item in data):
        raise DatasetError(
            f"{path}:{line_number}: responses_create_params.input is a list, so each item must be a message object "
            '(e.g. {"role": "user", "content": "..."}), as in NeMo Gym'
        )
    return row


def _decode(path: str | os.PathLike[str], line_number: int, raw: bytes) -> str:
    try:
        return decode_line(raw, first=line_number == 1)
    except JSONReadError as exc:
        raise DatasetError(f"{path}:{line_number}: {exc}") from None


class TaskStream:
    """The selected tasks of one input, opened once: ``first`` is checked before the run starts.

    Iterating yields every selected task, ``num_repeats`` times in a row, starting with ``first``
    (which is not read twice, so a pipe loses nothing). A stream is iterated at most once.
    """

    def __init__(self, path: str | os.PathLike[str], selection: TaskSlice) -> None:
        self.path = path
        self.selection = selection
        self.is_regular = check_input_file(path)
        """False for a pipe: no second pass (no progress total, no resume)."""
        self._handle = _open_input(path)
        self._lines = _SelectedLines(self._handle, selection)
        self._rows = self._parse_rows()
        self._started = False
        try:
            self.first: Task | None = self._next_task()
            """The first selected task (rollout 0), or None when the selection is empty."""
        except BaseException:
            self.close()
            raise

    def _parse_rows(self) -> Iterator[Task]:
        for line_number, index, raw in self._lines:
            row = quick_loads(raw)  # orjson where it reads the row exactly, else the exact reader
            if row is None:
                yield Task(index, 0, parse_row(self.path, line_number, _decode(self.path, line_number, raw)))
            else:
                yield Task(index, 0, check_row(self.path, line_number, row))
        if not self._lines.any_bytes:
            raise DatasetError(f"{self.path}: input is empty; it needs one JSON task per line")
        if not self._lines.any_rows:
            raise DatasetError(f"{self.path}: input file has no task rows (only blank lines)")

    def _next_task(self) -> Task | None:
        task = next(self._rows, None)
        if task is None:
            self.close()
        return task

    def __iter__(self) -> Iterator[Task]:
        if self._started:
            raise RuntimeError("a TaskStream is read once; open the tasks again to read them again")
        self._started = True
        return self._repeat_all()

    def _repeat_all(self) -> Iterator[Task]:
        task = self.first
        try:
            while task is not None:
                for repeat in range(self.selection.num_repeats):
                    yield Task(task.task_index, repeat, task.row)
                task = self._next_task()
        finally:
            self.close()

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> TaskStream:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def open_tasks(path: str | os.PathLike[str], selection: TaskSlice) -> TaskStream:
    """Open the input once and check its first selected row (see :class:`TaskStream`)."""
    return TaskStream(path, selection)


def read_tasks(path: str | os.PathLike[str], selection: TaskSlice) -> Iterator[Task]:
    """Yield the selected tasks, each ``num_repeats`` times in a row; blank lines are skipped."""
    with open_tasks(path, selection) as stream:
        yield from stream


# --- second passes (regular files only) ----------------------------------------------------------


def count_selected(path: str | os.PathLike[str], selection: TaskSlice) -> int | None:
    """How many rollouts the selection yields (for the progress bar); None for a pipe, which
    must not be read twice. Lines are scanned, not parsed, and the scan ends at the slice's end."""
    if not check_input_file(path):
        return None
    with _open_input(path) as handle:
        rows = sum(1 for _ in _SelectedLines(handle, selection))
    return rows * selection.num_repeats


def empty_selection(path: str | os.PathLike[str], selection: TaskSlice) -> str | None:
    """Why ``selection`` takes no task of the regular file ``path`` (a warning), or None when it
    takes one. The scan ends at the first selected line; only an empty selection counts them all."""
    if not check_input_file(path):
        return None  # a pipe is read once, by the collection itself
    with _open_input(path) as handle:
        if next(iter(_SelectedLines(handle, selection)), None) is not None:
            return None
        handle.seek(0)
        tasks = sum(1 for _ in _SelectedLines(handle, TaskSlice()))
    if selection.start_idx >= tasks:
        return f"start_idx {selection.start_idx} is past the end of {path} ({tasks} tasks): nothing to collect"
    return (
        f"the range of tasks [{selection.start_idx}, {selection.stop}) from end_idx={selection.end_idx} and "
        f"limit={selection.limit} is empty ({path} has {tasks} tasks): nothing to collect"
    )


def input_identity(path: str | os.PathLike[str], selection: TaskSlice) -> dict[str, Any]:
    """What identifies the tasks a run reads, for a resume to check it continues the same run.

    For a regular file: the resolved path, its size, and the blake2b digest and count of exactly
    the selected rows (their bytes without line endings or byte-order mark; no JSON parsing).
    A pipe cannot be read twice, so it is identified by its path alone.
    """
    if not check_input_file(path):
        return {"path": os.fspath(path), "kind": "pipe"}
    digest = hashlib.blake2b(digest_size=16)
    rows = 0
    with _open_input(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        for line_number, _index, raw in _SelectedLines(handle, selection):
            digest.update((raw.removeprefix(_BOM) if line_number == 1 else raw).rstrip(b"\r\n"))
            digest.update(b"\n")
            rows += 1
    return {"path": os.path.realpath(path), "size": size, "rows": rows, "blake2b": digest.hexdigest()}
