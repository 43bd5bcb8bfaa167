"""Benchmark names come from records anyone can write: their control characters never reach a terminal or markdown."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from tests.gate.synthetic import save_run, suite

HOSTILE = "bench.py::test_\x1b[2J\x1b]0;owned\x07\x9b31m"


def test_compare_shows_a_name_with_terminal_escapes_escaped(tmp_path: Path) -> None:
    def named(seed: int, factor: float) -> object:
        record = suite(seed, benchmarks=2, factor=factor)
        benches = [replace(record.benchmarks[0], name=HOSTILE), record.benchmarks[1]]
        return replace(record, benchmarks=benches)

    base = save_run(tmp_path, named(1, 1.0), "20260101T000000")  # type: ignore[arg-type]
    slow = save_run(tmp_path, named(2, 1.5), "20260102T000000")  # type: ignore[arg-type]
    markdown = tmp_path / "summary.md"
    done = subprocess.run([sys.executable, "-m", "gymbench.cli", "compare", str(base), str(slow), "-v",
                           "--markdown", str(markdown)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stderr  # 3: inconclusive (one run a side, no calibration)
    for text in (done.stdout, markdown.read_text()):
        assert "test_\\x1b[2J\\x1b]0;owned\\x07\\x9b31m" in text, text
        assert not any(ch in text for ch in "\x1b\x07\x9b")
