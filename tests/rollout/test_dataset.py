from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from gymbench import GymbenchError
from gymbench.rollout.dataset import (
    DatasetError,
    Task,
    TaskSlice,
    check_input_file,
    check_resumable_input,
    count_selected,
    input_identity,
    open_tasks,
    read_tasks,
)

T = TypeVar("T")


def write_tasks(path: Path, count: int) -> Path:
    with open(path, "w") as handle:
        for index in range(count):
            handle.write(
                json.dumps({"responses_create_params": {"input": f"q{index}"}, "expected_answer": str(index)}) + "\n"
            )
    return path


def test_slicing_is_half_open_and_indices_are_global(tmp_path: Path) -> None:
    path = write_tasks(tmp_path / "t.jsonl", 10)
    tasks = list(read_tasks(path, TaskSlice(start_idx=3, end_idx=6)))
    assert [t.task_index for t in tasks] == [3, 4, 5]
    assert tasks[0].row["expected_answer"] == "3"


def test_limit_counts_from_start_and_end_wins_when_smaller(tmp_path: Path) -> None:
    path = write_tasks(tmp_path / "t.jsonl", 10)
    assert [t.task_index for t in read_tasks(path, TaskSlice(start_idx=2, limit=3))] == [2, 3, 4]
    assert [t.task_index for t in read_tasks(path, TaskSlice(start_idx=2, end_idx=4, limit=5))] == [2, 3]
    assert list(read_tasks(path, TaskSlice(limit=0))) == []


def test_repeats_are_consecutive_with_rollout_indices(tmp_path: Path) -> None:
    path = write_tasks(tmp_path / "t.jsonl", 2)
    pairs = [(t.task_index, t.rollout_index) for t in read_tasks(path, TaskSlice(num_repeats=3))]
    assert pairs == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


def test_count_matches_what_is_read(tmp_path: Path) -> None:
    path = write_tasks(tmp_path / "t.jsonl", 10)
    for selection in (TaskSlice(), TaskSlice(2, 7, None, 2), TaskSlice(limit=4), TaskSlice(8, None, 5, 3)):
        assert count_selected(path, selection) == len(list(read_tasks(path, selection)))


def test_rows_are_streamed_not_loaded(tmp_path: Path) -> None:
    path = write_tasks(tmp_path / "t.jsonl", 3)
    with open(path, "a") as handle:
        handle.write("{broken\n")
    tasks = read_tasks(path, TaskSlice())
    assert next(tasks).task_index == 0  # the bad line 4 is not read yet
    list(zip(range(2), tasks, strict=False))
    with pytest.raises(DatasetError, match=r"t.jsonl:4: malformed JSON"):
        next(tasks)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"responses_create_params": {"input": "ok"}}\n[1, 2]\n', r":2: expected a JSON object"),
        ('{"prompt": "x"}\n', r":1: row has no 'responses_create_params' object"),
        ('{"responses_create_params": {"input": ""}}\n', r":1: responses_create_params.input must be"),
        (
            '{"responses_create_params": {"input": "a"}}\n{"responses_create_params": \n',
            r":2: malformed JSON",
        ),
        ("\n\n", "no task rows"),
        ("", "input file is empty"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(DatasetError, match=message) as info:
        list(read_tasks(path, TaskSlice()))
    assert str(path) in str(info.value)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="input file not found"):
        list(read_tasks(tmp_path / "none.jsonl", TaskSlice()))
    with pytest.raises(DatasetError, match="is a directory"):
        list(read_tasks(tmp_path, TaskSlice()))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start_idx": 5, "end_idx": 2}, r"start_idx \(5\) is after end_idx \(2\)"),
        ({"start_idx": -1}, "start_idx must be 0 or more"),
        ({"num_repeats": 0}, "num_repeats must be at least 1"),
        ({"limit": -3}, "limit must be 0 or more"),
    ],
)
def test_bad_slices(kwargs: dict, message: str) -> None:
    with pytest.raises(GymbenchError, match=message):
        TaskSlice(**kwargs)


# --- reading rows robustly ----------------------------------------------------------------------


def test_a_byte_order_mark_is_accepted_and_big_ids_stay_exact(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"responses_create_params": {"input": "q"}, "id": 12345678901234567890123}\n')
    (task,) = read_tasks(path, TaskSlice())
    assert task.row["id"] == 12345678901234567890123


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b'{"responses_create_params": {"input": "ok"}}\n{"x": "caf\xe9"}\n',
            r":2: not UTF-8 text \(byte 0xe9 at column 11\); re-encode",
        ),
        (b'{"responses_create_params": {"input": "ok"}, "score": NaN}\n', r":1: NaN is not valid JSON"),
        (b'{"responses_create_params": {"input": "ok"}, "x": ' + b"[" * 100_000 + b"\n", r":1: JSON nested too deeply"),
        (b'{"responses_create_params": {"input": "ok"}, "x": ' + b"7" * 5000 + b"}\n", r":1: cannot read a value"),
    ],
)
def test_unreadable_rows_are_clear_errors_naming_file_and_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(DatasetError, match=message) as info:
        list(read_tasks(path, TaskSlice()))
    assert str(info.value).startswith(f"{path}:")


def test_count_skips_blank_lines_as_reading_does(tmp_path: Path) -> None:
    path = write_tasks(tmp_path / "t.jsonl", 6)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("\n" + "".join(lines[:3]) + "  \n\n" + "".join(lines[3:]).rstrip("\n"))
    for selection in (TaskSlice(), TaskSlice(1, 5), TaskSlice(limit=2, num_repeats=2)):
        assert count_selected(path, selection) == len(list(read_tasks(path, selection)))


def test_too_many_repeats_for_the_rollout_index_bits() -> None:
    with pytest.raises(GymbenchError, match="num_repeats must be at most 16777216"):
        TaskSlice(num_repeats=(1 << 24) + 1)


# --- piped input --------------------------------------------------------------------------------


def task_lines(count: int) -> bytes:
    return "".join(json.dumps({"responses_create_params": {"input": f"q{i}"}}) + "\n" for i in range(count)).encode()


def within(seconds: float, work: Callable[[], T]) -> T:
    """Run ``work`` in a thread so that a blocked pipe fails the test instead of hanging it."""
    result: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(work())
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked on the pipe"
    if errors:
        raise errors[0]
    return result[0]


def feed_fifo(path: Path, data: bytes) -> threading.Thread:
    def write() -> None:
        with open(path, "wb") as handle:
            handle.write(data)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_a_fifo_is_read_once_with_its_first_row_kept(tmp_path: Path) -> None:
    fifo = tmp_path / "tasks.fifo"
    os.mkfifo(fifo)
    assert check_input_file(fifo) is False  # not refused as "empty", and not opened
    assert within(60, lambda: count_selected(fifo, TaskSlice())) is None  # reading would block: no writer yet
    feed_fifo(fifo, task_lines(5))

    def read() -> tuple[Task | None, list[tuple[int, int]]]:
        with open_tasks(fifo, TaskSlice(start_idx=1, num_repeats=2)) as stream:
            assert not stream.is_regular
            return stream.first, [(t.task_index, t.rollout_index) for t in stream]

    first, pairs = within(60, read)
    assert first is not None and first.task_index == 1 and first.row["responses_create_params"]["input"] == "q1"
    assert pairs == [(i, r) for i in range(1, 5) for r in range(2)]


def test_a_pipe_path_is_opened_exactly_once(tmp_path: Path) -> None:
    """``/dev/fd/N`` of a pipe: a second open would find the rows already drained by the first."""
    read_end, write_end = os.pipe()
    os.write(write_end, task_lines(4))
    os.close(write_end)
    try:
        stream = open_tasks(f"/dev/fd/{read_end}", TaskSlice())
        assert stream.first is not None and stream.first.task_index == 0
        assert [t.task_index for t in stream] == [0, 1, 2, 3]
    finally:
        os.close(read_end)


def test_an_empty_pipe_and_a_bad_first_row_fail_before_the_run(tmp_path: Path) -> None:
    fifo = tmp_path / "empty.fifo"
    os.mkfifo(fifo)
    feed_fifo(fifo, b"")
    with pytest.raises(DatasetError, match=r"empty.fifo: input is empty"):
        within(60, lambda: open_tasks(fifo, TaskSlice()))
    feed_fifo(fifo, b'{"prompt": 1}\n')
    with pytest.raises(DatasetError, match=r"empty.fifo:1: row has no 'responses_create_params'"):
        within(60, lambda: open_tasks(fifo, TaskSlice()))


def test_resume_refuses_a_pipe_but_not_a_file(tmp_path: Path) -> None:
    fifo = tmp_path / "tasks.fifo"
    os.mkfifo(fifo)
    with pytest.raises(GymbenchError, match=r"tasks.fifo: input is a pipe, so \+resume=true cannot re-read it"):
        check_resumable_input(fifo)
    check_resumable_input(write_tasks(tmp_path / "t.jsonl", 1))
    with pytest.raises(DatasetError, match="input file not found"):
        check_resumable_input(tmp_path / "none.jsonl")


def test_stdin_and_process_substitution(tmp_path: Path) -> None:
    """The real shell forms: ``< file`` piped into /dev/stdin, and bash's ``<(...)``."""
    source = tmp_path / "t.jsonl"
    source.write_bytes(task_lines(3))
    script = (
        "import sys; from gymbench.rollout.dataset import TaskSlice, count_selected, open_tasks\n"
        "for path in sys.argv[1:]:\n"
        "    stream = open_tasks(path, TaskSlice())\n"
        "    print(path.startswith('/dev/'), stream.is_regular, count_selected(path, TaskSlice()),"
        " [t.task_index for t in stream])\n"
    )
    command = f'cat {source} | "{sys.executable}" -c "$0" /dev/stdin <(cat {source})'
    done = subprocess.run(["bash", "-c", command, script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True False None [0, 1, 2]"] * 2


# --- input identity -----------------------------------------------------------------------------


def test_identity_covers_exactly_the_selected_rows(tmp_path: Path) -> None:
    path = write_tasks(tmp_path / "t.jsonl", 6)
    selection = TaskSlice(start_idx=1, end_idx=4)
    before = input_identity(path, selection)
    assert before["rows"] == 3 and before["size"] == path.stat().st_size
    assert before["path"] == str(path.resolve())
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"\n" + b"".join(lines[:5]) + lines[5].replace(b"q5", b"other"))
    after = input_identity(path, selection)
    assert after["blake2b"] == before["blake2b"] and after["size"] != before["size"]  # row 5 is not selected
    path.write_bytes(b"".join(lines).replace(b"q2", b"changed"))
    assert input_identity(path, selection)["blake2b"] != before["blake2b"]
    os.symlink(path, tmp_path / "link.jsonl")
    assert input_identity(tmp_path / "link.jsonl", selection)["path"] == str(path.resolve())


def test_identity_of_a_pipe_does_not_read_it(tmp_path: Path) -> None:
    fifo = tmp_path / "tasks.fifo"
    os.mkfifo(fifo)
    assert input_identity(fifo, TaskSlice()) == {"path": str(fifo), "kind": "pipe"}


def test_rows_read_exactly_whichever_reader_reads_them(tmp_path: Path) -> None:
    """A 20-digit id stays an integer and 0.1 stays 0.1, read by orjson or by the standard library;
    a bad row is still the standard library's error with its line."""
    from gymbench.rollout.dataset import DatasetError, TaskSlice, read_tasks

    params = '"responses_create_params": {"input": "hi"}'
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(
        f'\ufeff{{{params}, "id": 98765432109876543210123, "p": 0.1}}\n'
        f'{{{params}, "id": 7, "p": 0.1, "big": 123456789012345678901234567890}}\n'
        f'{{{params}, "id": 8, "p": 0.30000000000000004}}\n'.encode()
    )
    rows = [task.row for task in read_tasks(path, TaskSlice())]
    assert [row["id"] for row in rows] == [98765432109876543210123, 7, 8]
    assert rows[1]["big"] == 123456789012345678901234567890 and isinstance(rows[1]["big"], int)
    assert [repr(row["p"]) for row in rows] == ["0.1", "0.1", "0.30000000000000004"]
    path.write_bytes(f'{{{params}}}\n{{{params}, "x": NaN}}\n'.encode())
    with pytest.raises(DatasetError, match=r"tasks.jsonl:2: NaN is not valid JSON"):
        list(read_tasks(path, TaskSlice()))
