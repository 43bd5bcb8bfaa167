from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from gymbench import GymbenchError, jsonio
from gymbench.rollout import output as output_module
from gymbench.rollout.output import (
    FLUSH_AFTER_S,
    RolloutWriter,
    check_output_path,
    load_resume_state,
    pair_key,
    refuse_to_overwrite,
)
from gymbench.secrets import redact_bytes, register_secret


def row(task: int, rollout: int = 0, status: str = "ok", attempt: int = 1) -> str:
    return json.dumps({"task_index": task, "rollout_index": rollout, "status": status, "attempt": attempt})


def test_done_failed_and_truncated(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text(
        "\n".join([row(0), row(1, status="failed"), row(2, status="failed", attempt=3), row(3)]) + "\n" + row(4)[:-5]
    )
    state = load_resume_state(path, max_attempts=3)
    assert state.done == {pair_key(0, 0), pair_key(2, 0), pair_key(3, 0)}
    assert state.attempts == {pair_key(1, 0): 1}
    assert state.dropped_truncated and state.dropped_failed == 1
    kept = [json.loads(line)["task_index"] for line in path.read_text().splitlines()]
    assert kept == [0, 2, 3]
    assert path.read_text().endswith("\n")


def test_a_complete_object_without_its_newline_counts_as_truncated(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text(row(0) + "\n" + row(1))
    state = load_resume_state(path, max_attempts=3)
    assert state.done == {pair_key(0, 0)} and state.dropped_truncated


def test_untouched_file_is_not_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text(row(0) + "\n" + row(1) + "\n")
    before = path.stat().st_mtime_ns
    assert load_resume_state(path, 3).kept_rows == 2
    assert path.stat().st_mtime_ns == before


def test_foreign_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text('{"hello": 1}\n')
    with pytest.raises(GymbenchError, match=r"out.jsonl:1: not a gymbench rollout row"):
        load_resume_state(path, 3)


def test_writer_flushes_each_row(tmp_path: Path) -> None:
    writer = RolloutWriter(tmp_path / "sub" / "out.jsonl", append=False)
    writer.write({"a": 1})
    assert (tmp_path / "sub" / "out.jsonl").read_text() == '{"a":1}\n'
    writer.close()


async def test_rows_of_many_loop_turns_share_one_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flush per event-loop turn cost a system call per row or two; the rows of a whole
    interval go in one, and close() writes whatever is still buffered."""
    path = tmp_path / "out.jsonl"
    monkeypatch.setattr(output_module, "FLUSH_AFTER_S", 3600.0)
    writer = RolloutWriter(path, append=False)
    for turn in range(3):
        writer.write({"turn": turn})
        await asyncio.sleep(0)
    assert path.read_bytes() == b""  # still in the buffer: the flush is an hour away
    writer.close()
    assert path.read_text() == '{"turn":0}\n{"turn":1}\n{"turn":2}\n'
    monkeypatch.setattr(output_module, "FLUSH_AFTER_S", 0.0)
    writer = RolloutWriter(path, append=True)
    writer.write({"turn": 3})
    await asyncio.sleep(0.01)  # the timer is due: the loop has flushed
    assert path.read_text().endswith('{"turn":3}\n')
    writer.close()


def test_existing_output_is_never_silently_replaced(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    refuse_to_overwrite(path)
    path.write_text(row(0) + "\n")
    with pytest.raises(GymbenchError, match=r"\+resume=true.*\+overwrite=true"):
        refuse_to_overwrite(path)


# --- resume reading -----------------------------------------------------------------------------


def test_rows_from_another_tool_are_kept_as_done_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    lines = [
        json.dumps({"task_index": 0, "rollout_index": 0, "reward": 1.0}),  # indices, no status
        json.dumps({"_ng_task_index": 2**60 + 1, "_ng_rollout_index": 2, "reward": 0.0}),  # NeMo Gym's names
        row(2, status="failed"),
        "",
    ]
    path.write_text("\n".join(lines))
    state = load_resume_state(path, max_attempts=3)
    assert state.done == {pair_key(0, 0), pair_key(2**60 + 1, 2)}
    assert state.foreign_rows == 2 and state.kept_rows == 2 and state.dropped_failed == 1
    kept = path.read_text().splitlines()
    assert kept == lines[:2]  # the failed row went (it is redone); the foreign ones stayed


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"task_index": 0, "rollout_index": 0, "status": "failed", "attempt": "x"}, r"attempt must be a whole number"),
        ({"task_index": 0, "rollout_index": 0, "status": "failed", "attempt": -1}, r"attempt must be a whole number"),
        ({"task_index": 0, "rollout_index": 0, "status": "failed", "attempt": True}, r"attempt .* got True"),
        ({"task_index": 1.5, "rollout_index": 0, "status": "ok"}, r"task_index must be a whole number 0 or more"),
        ({"task_index": "3", "rollout_index": 0, "status": "ok"}, r"task_index must be .* got '3'"),
        ({"task_index": -1, "rollout_index": 0, "status": "ok"}, r"task_index must be a whole number 0 or more"),
        ({"task_index": 0, "rollout_index": 2**24, "status": "ok"}, r"rollout_index must be .* from 0 to 16777215"),
    ],
)
def test_bad_index_or_attempt_is_a_clear_error(tmp_path: Path, fields: dict, message: str) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text(row(5) + "\n" + json.dumps(fields) + "\n")
    with pytest.raises(GymbenchError, match=r"out.jsonl:2: " + message):
        load_resume_state(path, 3)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"task_index": 0, "rollout_index": 0, "x": ' + b"[" * 100_000 + b"\n", "nested too deeply"),
        (b'{"task_index": 0, "rollout_index": 0, "x": ' + b"9" * 5000 + b"}\n", "cannot read a value"),
        (b'{"task_index": 0, "rollout_index": 0, "reward": NaN}\n', "NaN is not valid JSON"),
    ],
)
def test_unreadable_rows_are_clear_errors(tmp_path: Path, line: bytes, message: str) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(line)
    with pytest.raises(GymbenchError, match=r"out.jsonl:1: not a gymbench rollout row \(.*" + message):
        load_resume_state(path, 3)


# --- writing rows -------------------------------------------------------------------------------


def test_rows_with_huge_ints_and_lone_surrogates_are_written(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    writer = RolloutWriter(path, append=False)
    writer.write({"id": 2**70, "text": "half a pair: \ud83d"})
    writer.close()
    assert jsonio.loads(path.read_bytes()) == {"id": 2**70, "text": "half a pair: \ud83d"}


def test_echoed_api_keys_never_reach_the_file(tmp_path: Path) -> None:
    secret = "test-key-" + os.urandom(8).hex()
    register_secret(secret)
    path = tmp_path / "out.jsonl"
    writer = RolloutWriter(path, append=False)
    writer.write({"failure": {"reason": f"400: bad header Authorization: Bearer {secret}, key={secret}"}})
    writer.close()
    text = path.read_text()
    assert secret not in text and "[REDACTED]" in text


async def test_a_flush_redacts_each_row_as_if_alone(tmp_path: Path) -> None:
    """The rows of a flush are scanned in one pass; a batch with a key is redacted row by row, so
    the file holds exactly what writing each row alone gave (keys at a row's edges included)."""
    secret = "test-key-" + os.urandom(8).hex()
    register_secret(secret)
    rows = [
        {"text": "plain"},
        {"text": f"Authorization: BEARER {secret}"},
        {"text": "sk-abcdefgh12345678"},
        {"reason": f"{secret}"},
        {"text": "bearer"},
        {"text": "ok"},
    ]
    path = tmp_path / "out.jsonl"
    writer = RolloutWriter(path, append=False)
    for row in rows:
        writer.write(row)
    await asyncio.sleep(0)  # one flush for all of them, when the timer is due
    writer.close()
    assert path.read_bytes() == b"".join(redact_bytes(jsonio.dumps(row, newline=True)) for row in rows)
    assert secret not in path.read_text() and "sk-abcdefgh" not in path.read_text()
    assert writer.rows_written == len(rows) and writer.lost() == []


def test_a_write_error_names_the_file(tmp_path: Path) -> None:
    directory = tmp_path / "out.jsonl"
    directory.mkdir()
    with pytest.raises(GymbenchError, match=r"out.jsonl: cannot write rollouts \(Is a directory\)"):
        RolloutWriter(directory, append=True)
    writer = RolloutWriter(Path("/dev/full"), append=True)
    with pytest.raises(GymbenchError, match=r"/dev/full: cannot write rollouts \(No space left on device\)"):
        writer.write({"a": 1})  # no event loop: flushed at once
    with pytest.raises(GymbenchError, match="/dev/full"):
        writer.close()


async def test_a_failed_timed_flush_surfaces_on_the_next_write_or_close() -> None:
    writer = RolloutWriter(Path("/dev/full"), append=True)
    writer.write({"a": 1})
    writer.write({"a": 2})  # buffered: the flush comes FLUSH_AFTER_S after the first write
    await asyncio.sleep(2 * FLUSH_AFTER_S)  # the loop runs the earlier timer first
    with pytest.raises(GymbenchError, match=r"/dev/full: cannot write rollouts \(No space left on device\)"):
        writer.write({"a": 3})
    with pytest.raises(GymbenchError, match="/dev/full"):
        writer.close()


# --- output path checks -------------------------------------------------------------------------


def test_output_that_is_the_input_is_refused(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("{}\n")
    os.symlink(tasks, tmp_path / "link.jsonl")
    os.link(tasks, tmp_path / "hard.jsonl")
    for output in (tasks, tmp_path / "link.jsonl", tmp_path / "hard.jsonl", tmp_path / "sub" / ".." / "tasks.jsonl"):
        with pytest.raises(GymbenchError, match="is the input file .* would destroy the tasks"):
            check_output_path(tasks, output)
    check_output_path(tasks, tmp_path / "out.jsonl")
    check_output_path(tasks, tmp_path / "new" / "dir" / "out.jsonl")


def test_output_that_is_a_directory_or_under_a_file_is_refused(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("{}\n")
    with pytest.raises(GymbenchError, match="is a directory; \\+output_jsonl_fpath must name a file"):
        check_output_path(tasks, tmp_path)
    with pytest.raises(GymbenchError, match=r"tasks.jsonl is a file, so no directory can be created there"):
        check_output_path(tasks, tasks / "deeper" / "out.jsonl")
