"""A FIFO where a file is expected: read to its end when someone writes, one line when nobody does."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import gymbench.jsonio
from gymbench.cli import main
from gymbench.errors import GymbenchError
from gymbench.jsonio import read_capped


@pytest.fixture
def fifo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(gymbench.jsonio, "FIFO_IDLE_S", 0.5)  # the wait, not the machine's speed
    path = tmp_path / "record.json"
    os.mkfifo(path)
    return path


def test_a_fifo_nobody_writes_to_is_one_line_not_a_hang(fifo: Path) -> None:
    with pytest.raises(GymbenchError, match=r"a FIFO where a results file was expected, and nothing was written"):
        read_capped(fifo, "results")


def test_a_fifo_is_read_to_its_end_in_pieces(fifo: Path) -> None:
    gate = threading.Event()

    def write() -> None:
        with open(fifo, "wb") as sink:
            sink.write(b'{"a": ')
            sink.flush()
            gate.wait(10)
            sink.write(b"1}\n")

    writer = threading.Thread(target=write)
    writer.start()
    gate.set()
    assert read_capped(fifo, "results") == b'{"a": 1}\n'
    writer.join(10)


def test_compare_of_a_silent_fifo_exits_with_one_line(fifo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(fifo), str(fifo)]) not in (0, None)
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and str(fifo) in said[0] and "Traceback" not in said[0], said
