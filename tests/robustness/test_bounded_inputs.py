"""Issue 28: inputs that never end or are far too large, and malformed files, are one line each.

``/dev/zero`` and ``/dev/urandom`` (read-only), a 2 GB sparse file of NUL bytes (``truncate``:
no disk used) and a 50 MB YAML scalar, given as collect's tasks, ``--config``, ``show`` and
``timings``; malformed shard plans (not JSON, wrong types, missing keys, shards past the
selection); rollouts with string or 400-digit timings; ``train +lr`` past any real rate. Each is
refused with one ``gymbench: error:`` line and exit 2, without reading the whole thing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gymbench.cli import main

pytestmark = pytest.mark.hostile

FAST_SIM = ["+sim.step_base_s=0.004", "+sim.step_per_seq_s=0", "+sim.output_tokens_mean=8"]


def _one_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    status = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2, err
    assert len(lines) == 1 and lines[0].startswith("gymbench: error: "), err
    assert "Traceback" not in err
    return lines[0]


def _endless(source: str, tmp_path: Path) -> str:
    if source == "sparse":
        path = tmp_path / "nuls.jsonl"
        with open(path, "wb") as handle:
            handle.truncate(2 * 1024**3)
        return str(path)
    if source == "yaml_scalar":
        path = tmp_path / "big.yaml"
        path.write_text("model: " + "a" * 50_000_000 + "\n")
        return str(path)
    return source


def _collect_input(path: str, tmp_path: Path) -> list[str]:
    return ["collect", f"+input_jsonl_fpath={path}", f"+output_jsonl_fpath={tmp_path / 'o.jsonl'}",
            "+save_results=false", "+progress=false", *FAST_SIM]  # fmt: skip


COMMANDS = {
    "collect_input": _collect_input,
    "config": lambda path, tmp: ["collect", "--config", path],
    "show": lambda path, tmp: ["show", path],
    "timings": lambda path, tmp: ["timings", path],
}
SOURCES = ["/dev/zero", "/dev/urandom", "sparse", "yaml_scalar"]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_endless_or_huge_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, source: str
) -> None:
    path = _endless(source, tmp_path)
    line = _one_error(COMMANDS[command](path, tmp_path), capsys)
    assert path in line
    if source.startswith("/dev/"):
        assert "is a device" in line
    elif source == "sparse" or command == "config":
        assert "larger than" in line or "a line longer than 64 MiB" in line
    assert not (tmp_path / "o.jsonl").exists()


def test_a_character_device_made_here_is_refused_as_tasks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A device node of /dev/zero's numbers in a scratch folder (made only where mknod is allowed)."""
    node = tmp_path / "zero"
    try:
        os.mknod(node, 0o444 | 0o020000, os.makedev(1, 5))
    except OSError as exc:
        pytest.skip(f"cannot make a device node here ({exc.strerror})")
    assert "is a device" in _one_error(_collect_input(str(node), tmp_path), capsys)


def _tasks(tmp_path: Path, count: int = 10) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({"responses_create_params": {"input": f"q{i}"}}) + "\n" for i in range(count)))
    return path


PLAN = {"start_idx": 0, "tasks": 10, "num_repeats": 1}
BAD_PLANS = {
    "not_json": "{shards: [",
    "a_list": json.dumps([[0, 10]]),
    "missing_shards": json.dumps(PLAN),
    "shards_a_string": json.dumps({**PLAN, "shards": "0-10"}),
    "huge_shard": json.dumps({**PLAN, "shards": [[0, 99999999]]}),
    "string_bounds": json.dumps({**PLAN, "shards": [["0", "10"]]}),
    "float_bounds": json.dumps({**PLAN, "shards": [[0, 10.0]]}),
    "overlap": json.dumps({**PLAN, "shards": [[0, 6], [4, 10]]}),
    "gap": json.dumps({**PLAN, "shards": [[0, 4], [6, 10]]}),
    "short": json.dumps({**PLAN, "shards": [[0, 4]]}),
    "empty_shard": json.dumps({**PLAN, "shards": [[0, 0], [0, 10]]}),
    "negative": json.dumps({**PLAN, "shards": [[-5, 10]]}),
    "tasks_a_string": json.dumps({**PLAN, "tasks": "10", "shards": [[0, 10]]}),
}


@pytest.mark.parametrize("case", sorted(BAD_PLANS))
def test_a_malformed_shard_plan_is_one_line_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    out = tmp_path / "out.jsonl"
    plan = out.with_name("out.jsonl.shards") / "plan.json"
    plan.parent.mkdir()
    plan.write_text(BAD_PLANS[case])
    argv = ["collect", f"+input_jsonl_fpath={_tasks(tmp_path)}", f"+output_jsonl_fpath={out}", "+num_workers=2",
            "+save_results=false", "+progress=false", *FAST_SIM]  # fmt: skip
    line = _one_error(argv, capsys)
    assert str(plan) in line
    assert sorted(p.name for p in plan.parent.iterdir()) == ["plan.json"] and not out.exists()


ROW = {"task_index": 0, "rollout_index": 0, "status": "ok", "usage": {"completion_tokens": 4},
       "timings": {"total": 1.0, "generation": 0.5}}  # fmt: skip
BAD_ROWS = {
    "string_timing": {**ROW, "timings": {"total": "fast"}},
    "digits_400": {**ROW, "timings": {"total": int("9" * 400)}},
    "bool_timing": {**ROW, "timings": {"total": True}},
    "list_timing": {**ROW, "timings": {"total": [1.0]}},
    "string_tokens": {**ROW, "usage": {"completion_tokens": "4"}},
    "usage_a_list": {**ROW, "usage": [4]},
}


@pytest.mark.parametrize("fmt", ["csv", "json"])
@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_timings_of_a_malformed_row_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, fmt: str
) -> None:
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text(json.dumps(ROW) + "\n" + json.dumps(BAD_ROWS[case]) + "\n")
    out = tmp_path / f"t.{fmt}"
    line = _one_error(["timings", str(rollouts), "-o", str(out), "--format", fmt], capsys)
    assert f"{rollouts}:2:" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]  # no export, no temporary file


@pytest.mark.parametrize("lr", ["1e300", "1e39", "nan", "inf", "-inf", "-1"])
def test_train_refuses_an_impossible_learning_rate_before_any_work(capsys: pytest.CaptureFixture[str], lr: str) -> None:
    assert "setting 'lr'" in _one_error(["train", f"+lr={lr}"], capsys)
