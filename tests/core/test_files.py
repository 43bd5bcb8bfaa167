"""The one atomic writer (``jsonio.AtomicFile``) and the one rollouts-file reader (``RolloutsFile``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymbench.errors import GymbenchError
from gymbench.jsonio import AtomicFile, write_json_atomic
from gymbench.rollouts_file import RolloutsFile

# --- AtomicFile ---------------------------------------------------------------------------------


def test_a_file_appears_whole_only_when_the_block_ends(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "out.jsonl"
    with AtomicFile(path) as target:
        target.write(b"one\n")
        assert not path.exists()
        (temporary,) = list(path.parent.iterdir())
        assert temporary.name.startswith(".out.jsonl.") and temporary.name.endswith(".tmp")
    assert path.read_bytes() == b"one\n" and list(path.parent.iterdir()) == [path]


def test_two_writers_of_one_path_do_not_share_a_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    first, second = AtomicFile(path), AtomicFile(path)
    assert first.temporary != second.temporary
    first.discard()
    second.discard()


def test_an_error_in_the_block_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "out.csv"
    path.write_text("old\n")
    with pytest.raises(ValueError, match="boom"), AtomicFile(path, text=True) as target:
        target.write("new\n")
        raise ValueError("boom")
    assert path.read_text() == "old\n" and list(tmp_path.iterdir()) == [path]


def test_a_path_that_cannot_be_written_is_an_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(GymbenchError, match=r"file/x.json: cannot write here \(.*\); choose another path"):
        write_json_atomic(blocker / "x.json", {"a": 1})
    directory = tmp_path / "dir"
    directory.mkdir()
    with (
        pytest.raises(GymbenchError, match=r"dir: cannot write \(.*\); resume again"),
        AtomicFile(directory, then="; resume again") as target,
    ):
        target.write(b"x")
    assert list(directory.iterdir()) == []


def test_json_is_written_whole_and_nan_refused(tmp_path: Path) -> None:
    path = write_json_atomic(tmp_path / "x.json", {"a": [1, 2]})
    assert json.loads(path.read_text()) == {"a": [1, 2]}
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_json_atomic(path, {"a": float("nan")})
    assert json.loads(path.read_text()) == {"a": [1, 2]} and list(tmp_path.iterdir()) == [path]


# --- RolloutsFile -------------------------------------------------------------------------------


def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(lines))
    return path


def test_rows_skip_blank_lines_and_number_lines_as_an_editor_does(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", '\ufeff{"a": 1}\n', "\n", '{"a": 2}\n')
    assert [(line.number, line.row) for line in RolloutsFile(path).lines()] == [(1, {"a": 1}), (3, {"a": 2})]


def test_a_bad_line_is_an_error_naming_the_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", '{"a": 1}\n', "[1]\n")
    with pytest.raises(GymbenchError, match=r"r.jsonl:2: not a rollout row \(a JSON list, not an object\); fix it"):
        list(RolloutsFile(path, then="; fix it").rows())
    with pytest.raises(GymbenchError, match=r"missing.jsonl: cannot read the rollouts file \(No such file"):
        list(RolloutsFile(tmp_path / "missing.jsonl").rows())


def test_skipped_lines_are_counted_and_the_first_named(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", "{not json\n", '{"a": 1}\n', '"text"\n')
    rollouts = RolloutsFile(path)
    assert list(rollouts.rows(on_bad="skip")) == [{"a": 1}]
    note = rollouts.skipped_note()
    assert note is not None and "skipped 2 lines that are not a rollout row" in note
    assert "(the first: " in note and "r.jsonl:1: not a rollout row (malformed JSON" in note


def test_a_last_line_cut_short_is_read_skipped_or_refused_as_asked(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", '{"a": 1}\n', '{"a": 2}')
    rollouts = RolloutsFile(path)
    assert list(rollouts.rows()) == [{"a": 1}, {"a": 2}]
    assert list(rollouts.rows(on_cut="skip")) == [{"a": 1}] and rollouts.cut
    with pytest.raises(GymbenchError, match=r"r.jsonl:2: the last row is cut short"):
        list(rollouts.rows(on_cut="raise"))
