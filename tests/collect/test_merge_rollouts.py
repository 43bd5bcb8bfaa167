"""``gymbench merge-rollouts``: splits joined only when every pair is there exactly once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.collect.merge import Expected, merge_rollouts
from gymbench.errors import GymbenchError
from gymbench.rollout.dataset import TaskSlice

from ..rollout.test_dataset import write_tasks


def write_rows(path: Path, pairs: list[tuple[int, int]], *, nemo_gym: bool = False, status: str = "ok") -> Path:
    with open(path, "w") as handle:
        for task, rollout in pairs:
            if nemo_gym:  # NeMo Gym's own field names, no status
                row = {"_ng_task_index": task, "_ng_rollout_index": rollout, "reward": 1.0}
            else:
                row = {"task_index": task, "rollout_index": rollout, "status": status}
            handle.write(json.dumps(row) + "\n")
    return path


def pairs_in(path: Path) -> list[tuple[int, int]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r.get("task_index", r.get("_ng_task_index")), r.get("rollout_index", r.get("_ng_rollout_index")))
            for r in rows]  # fmt: skip


def test_splits_of_both_tools_merge_in_order_and_check_against_the_tasks(tmp_path: Path, capsys) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 6)
    first = write_rows(tmp_path / "a.jsonl", [(t, r) for t in range(3) for r in range(2)])
    second = write_rows(tmp_path / "b.jsonl", [(t, r) for t in range(3, 6) for r in range(2)], nemo_gym=True)
    out = tmp_path / "all.jsonl"
    merge = ["merge-rollouts", str(first), str(second), "-o", str(out), "--input", str(tasks), "--num-repeats", "2"]
    assert main(merge) == 0
    assert pairs_in(out) == [(t, r) for t in range(6) for r in range(2)]
    assert out.read_bytes() == first.read_bytes() + second.read_bytes()  # rows as they were
    assert "none missing" in capsys.readouterr().err


def test_a_duplicate_pair_is_refused_naming_both_places(tmp_path: Path, capsys) -> None:
    first = write_rows(tmp_path / "a.jsonl", [(0, 0), (1, 0), (2, 0)])
    second = write_rows(tmp_path / "b.jsonl", [(2, 0), (3, 0)])
    out = tmp_path / "all.jsonl"
    assert main(["merge-rollouts", str(first), str(second), "-o", str(out)]) == 2
    error = capsys.readouterr().err
    assert f"1 duplicate pair(s): 2/0 in {first}:3 and {second}:1" in error
    assert not out.exists() and not list(tmp_path.glob(".all.jsonl.*"))  # nothing written, no temporary left


def test_a_gap_and_a_stray_pair_are_refused(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 10)
    first = write_rows(tmp_path / "a.jsonl", [(t, 0) for t in range(0, 4)])
    second = write_rows(tmp_path / "b.jsonl", [(t, 0) for t in range(6, 10)] + [(12, 0)])
    with pytest.raises(GymbenchError) as error:
        merge_rollouts([first, second], tmp_path / "all.jsonl", Expected.from_input(tasks, TaskSlice()))
    assert "2 missing pair(s) (task/rollout): 4/0, 5/0" in str(error.value)
    assert "1 pair(s) outside the selection: 12/0" in str(error.value)


def test_a_row_cut_by_a_kill_is_an_error_not_dropped(tmp_path: Path) -> None:
    split = write_rows(tmp_path / "a.jsonl", [(0, 0), (1, 0)])
    with open(split, "a") as handle:
        handle.write('{"task_index": 2, "rollout_')
    with pytest.raises(GymbenchError, match=r"a.jsonl:3: the last row is cut short"):
        merge_rollouts([split], tmp_path / "all.jsonl")


def test_failed_rows_are_kept_and_counted(tmp_path: Path) -> None:
    ok = write_rows(tmp_path / "a.jsonl", [(0, 0)])
    failed = write_rows(tmp_path / "b.jsonl", [(1, 0)], status="failed")
    report = merge_rollouts([ok, failed], tmp_path / "all.jsonl")
    assert (report.rows, report.failed_rows, report.exact) == (2, 1, True)


def test_an_existing_output_or_an_input_named_twice_is_refused(tmp_path: Path, capsys) -> None:
    split = write_rows(tmp_path / "a.jsonl", [(0, 0)])
    out = write_rows(tmp_path / "all.jsonl", [(5, 0)])
    assert main(["merge-rollouts", str(split), "-o", str(out)]) == 2
    assert "already exists; add --overwrite" in capsys.readouterr().err
    assert main(["merge-rollouts", str(split), str(split), "-o", str(tmp_path / "new.jsonl")]) == 2
    assert "named twice" in capsys.readouterr().err
    assert main(["merge-rollouts", str(split), "-o", str(out), "--overwrite"]) == 0
    assert pairs_in(out) == [(0, 0)]


def test_a_missing_tasks_file_is_named_with_merge_rollouts_own_flag(tmp_path: Path, capsys) -> None:
    split = write_rows(tmp_path / "a.jsonl", [(0, 0)])
    missing = tmp_path / "missing.jsonl"
    assert main(["merge-rollouts", str(split), "-o", str(tmp_path / "all.jsonl"), "--input", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"{missing}: input file not found; pass --input PATH" in err
    assert "+input_jsonl_fpath" not in err and not (tmp_path / "all.jsonl").exists()
