"""The run fingerprint beside the output, checked when a run is resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymbench import GymbenchError
from gymbench.rollout.identity import check_run_fingerprint, run_fingerprint_path, write_run_fingerprint

RUN = {
    "input": {"path": "/data/tasks.jsonl", "size": 120, "rows": 3, "blake2b": "ab" * 16},
    "verifier": {"name": "exact-match", "options": {"strip": True, "case": False}},
    "responses_create_params": {"temperature": 0.7},
    "num_repeats": 4,
    "limit": None,
    "model": "m",
}


def changed(**updates: object) -> dict:
    return {**json.loads(json.dumps(RUN)), **updates}


def test_the_sidecar_sits_beside_the_output(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    write_run_fingerprint(output, RUN)
    content = json.loads((tmp_path / "out.jsonl.run.json").read_text())
    assert run_fingerprint_path(output) == tmp_path / "out.jsonl.run.json"
    assert content["format"] == "gymbench-run/2" and content["fingerprint"] == RUN


def test_the_same_run_resumes_quietly_and_order_does_not_matter(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    write_run_fingerprint(output, RUN)
    same = changed(verifier={"options": {"case": False, "strip": True}, "name": "exact-match"})
    assert check_run_fingerprint(output, dict(reversed(list(same.items()))), force=False) == []


def test_every_difference_is_listed(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    write_run_fingerprint(output, RUN)
    now = changed(num_repeats=8, model="x" * 500)
    now["input"]["blake2b"] = "cd" * 16
    now["verifier"]["options"]["strip"] = False
    del now["limit"]
    with pytest.raises(GymbenchError) as info:
        check_run_fingerprint(output, now, force=False)
    message = str(info.value)
    assert message.startswith(f"{output}: ")
    assert f'input.blake2b: was "{"ab" * 16}", now "{"cd" * 16}"' in message
    assert "num_repeats: was 4, now 8" in message and "verifier.options.strip: was true, now false" in message
    assert "limit: was null, now (absent)" in message
    assert 'model: was "m", now "xxx' in message and "x" * 100 not in message  # long values shortened
    assert "resuming would mix two runs in one file" in message and "+resume_force=true" in message
    assert json.loads(run_fingerprint_path(output).read_text())["fingerprint"] == RUN  # unchanged


def test_force_turns_differences_into_warnings_and_rewrites(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    write_run_fingerprint(output, RUN)
    warnings = check_run_fingerprint(output, changed(num_repeats=8), force=True)
    assert len(warnings) == 1 and "num_repeats: was 4, now 8" in warnings[0]
    assert check_run_fingerprint(output, changed(num_repeats=8), force=False) == []


def test_missing_sidecar_beside_rows_is_a_warning_then_written(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    assert check_run_fingerprint(output, RUN, force=False) == []  # nothing written yet: nothing to check
    run_fingerprint_path(output).unlink()
    output.write_text('{"task_index": 0, "rollout_index": 0}\n')
    (warning,) = check_run_fingerprint(output, RUN, force=False)
    assert warning.startswith(f"no run fingerprint beside {output} (written by an older gymbench or another tool)")
    assert json.loads(run_fingerprint_path(output).read_text())["fingerprint"] == RUN


def test_unreadable_sidecar_is_an_error_unless_forced(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    run_fingerprint_path(output).write_text("{broken")
    with pytest.raises(GymbenchError, match=r"out.jsonl.run.json: cannot read run fingerprint.*delete it"):
        check_run_fingerprint(output, RUN, force=False)
    (warning,) = check_run_fingerprint(output, RUN, force=True)
    assert "writing a new one" in warning
    assert check_run_fingerprint(output, RUN, force=False) == []


def test_paths_and_tuples_are_recorded_as_json(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    write_run_fingerprint(output, {"input": tmp_path / "t.jsonl", "range": (1, 5), "id": 2**70})
    assert (
        check_run_fingerprint(output, {"input": str(tmp_path / "t.jsonl"), "range": [1, 5], "id": 2**70}, False) == []
    )
