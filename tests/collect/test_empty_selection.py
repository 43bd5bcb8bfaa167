"""Issue 28: a task range that selects nothing (start_idx past the end, an empty end_idx/limit range)
says so in one warning and exits 0 with an empty output, as NeMo Gym's slice would; the same with
workers (which used to fail with "merge-rollouts needs at least one rollouts file")."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymbench.cli import main

from ..rollout.test_dataset import write_tasks
from .test_collect_cli import FAST_SIM

pytestmark = pytest.mark.hostile  # a case of the adversarial sweep (issue 24): benches/hostile_count.sh

EMPTY = {
    "past_end": (["+start_idx=7"], "start_idx 7 is past the end of"),
    "at_end": (["+start_idx=5"], "start_idx 5 is past the end of"),
    "far_past_end": (["+start_idx=99999999", "+end_idx=100000000"], "start_idx 99999999 is past the end of"),
    "end_equals_start": (["+start_idx=2", "+end_idx=2"], "is empty"),
    "limit_zero": (["+limit=0"], "is empty"),
}


@pytest.mark.parametrize("workers", ["+num_workers=1", "+num_workers=2"])
@pytest.mark.parametrize("case", sorted(EMPTY))
def test_an_empty_selection_warns_once_and_exits_0(
    case: str, workers: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 5)
    out = tmp_path / "out.jsonl"
    extra, expected = EMPTY[case]
    argv = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+progress=false",
            "+save_results=false", workers, *extra, *FAST_SIM]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "nothing to collect" in line]
    assert len(warnings) == 1 and expected in warnings[0] and "5 tasks" in warnings[0], err
    assert "merge-rollouts" not in err and "Traceback" not in err
    assert not out.exists() or out.read_bytes() == b""


def test_a_selection_with_tasks_gives_no_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 5)
    out = tmp_path / "out.jsonl"
    argv = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+progress=false",
            "+save_results=false", "+start_idx=4", *FAST_SIM]  # fmt: skip
    assert main(argv) == 0
    assert "nothing to collect" not in capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 1
