"""Rows both tools read: NeMo Gym's fields beside gymbench's, pairs read from either, the aggregate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gymbench import GymbenchError
from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.rollout.agent_metrics import agent_entries, aggregate_metrics_path, baseline_metrics, read_rows
from gymbench.rollout.dataset import Task
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.rollout.output import read_pair
from gymbench.rollout.rows import build_row
from gymbench.rollout.verification import Judgement
from gymbench.testing import FakeBackend
from gymbench.types import Generation, GenerationFailed, Verdict

from .test_dataset import write_tasks

SENT = {"input": "q", "temperature": 0.5}
TASK = Task(3, 1, {"responses_create_params": {"input": "q"}, "expected_answer": "4"})


def agent_generation(**extra: object) -> Generation:
    return Generation("4", {"output": [], "usage": {"output_tokens": 2}}, reward=1.0, extra=extra)


def test_a_row_has_both_tools_indices_and_says_when_the_agent_scored_it() -> None:
    echoed = {"input": "q", "temperature": 0.5, "tools": [], "tool_choice": "auto"}
    generation = agent_generation(responses_create_params=echoed, agent_ref={"name": "a"}, _ng_task_index=99)
    row = build_row(TASK, 1, SENT, generation, None, Judgement(Verdict(1.0)), {}, "exact-match")
    assert (row["_ng_task_index"], row["_ng_rollout_index"]) == (row["task_index"], row["rollout_index"]) == (3, 1)
    assert row["responses_create_params"] == echoed and row["agent_ref"] == {"name": "a"}
    assert row["verifier"]["name"] == "agent"
    judged = build_row(TASK, 1, SENT, Generation("4"), None, Judgement(Verdict(1.0)), {}, "exact-match")
    assert judged["verifier"]["name"] == "exact-match" and judged["responses_create_params"] == SENT
    failed = build_row(TASK, 2, SENT, None, GenerationFailed("timeout", "slow"), None, {}, "exact-match")
    assert failed["_ng_task_index"] == 3 and failed["responses_create_params"] == SENT and failed["status"] == "failed"


@pytest.mark.parametrize(
    ("row", "pair"),
    [
        ({"task_index": 4, "rollout_index": 2}, (4, 2)),
        ({"_ng_task_index": 4, "_ng_rollout_index": 2}, (4, 2)),
        ({"task_index": 4, "_ng_task_index": 4, "rollout_index": 2, "_ng_rollout_index": 2}, (4, 2)),
    ],
)
def test_a_pair_reads_from_either_tools_fields(row: dict, pair: tuple[int, int]) -> None:
    assert read_pair(Path("r.jsonl"), 7, row) == pair


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ({"task_index": 4, "_ng_task_index": 5, "rollout_index": 0}, "task_index (4) and _ng_task_index (5) disagree"),
        ({"_ng_task_index": 4, "_ng_rollout_index": -1}, "_ng_rollout_index must be a whole number"),
        ({"_ng_task_index": 4}, "no rollout_index or _ng_rollout_index"),
    ],
)
def test_a_pair_that_is_not_one_is_an_error_naming_file_and_line(row: dict, says: str) -> None:
    with pytest.raises(GymbenchError) as info:
        read_pair(Path("r.jsonl"), 7, row)
    assert str(info.value).startswith("r.jsonl:7: ") and says in str(info.value)


@pytest.mark.parametrize(
    ("output", "metrics"),
    [
        ("rollouts.jsonl", "rollouts_aggregate_metrics.json"),
        ("a.b.jsonl", "a.b_aggregate_metrics.json"),
        ("rollouts", "rollouts_aggregate_metrics.json"),
    ],
)
def test_the_aggregate_file_is_named_as_nemo_gym_names_it(output: str, metrics: str) -> None:
    assert aggregate_metrics_path(Path("d") / output) == Path("d") / metrics


def test_the_baseline_aggregate_is_nemo_gyms_reward_profile() -> None:
    rewards = {(0, 0): 1.0, (0, 1): 0.0, (1, 0): 1.0, (1, 1): 1.0, (1, 2): 0.0}
    rows = [
        {"_ng_task_index": t, "_ng_rollout_index": r, "agent_ref": {"name": "a"}, "reward": w, "status": "ok",
         "retries": 3, "passed": w == 1.0, "response": {"output": ["x"], "usage": {"output_tokens": 10 + r}}}
        for (t, r), w in rewards.items()
    ] + [{"_ng_task_index": 2, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}, "status": "failed", "reward": None},
         {"_ng_task_index": 2, "_ng_rollout_index": 1, "reward": 1.0}]  # fmt: skip
    entries = agent_entries(rows)
    assert list(entries) == ["a"] and len(entries["a"]) == 5
    first_entry = json.loads(next(iter(entries["a"])))
    assert json.loads(entries["a"].json_array()) == [json.loads(entry) for entry in entries["a"]]
    assert first_entry["response"] == {"usage": {"output_tokens": 10}} and "retries" not in first_entry
    metrics = baseline_metrics(entries["a"])
    values = np.array(list(rewards.values()))
    agent = metrics["agent_metrics"]
    assert agent["mean/reward"] == pytest.approx(values.mean()) and agent["median/reward"] == 1.0
    assert agent["std/reward"] == pytest.approx(values.std(ddof=1)) and agent["max/output_tokens"] == 12
    assert agent["mean/passed"] == pytest.approx(0.6) and "mean/retries" not in agent
    assert metrics["key_metrics"] == {k: v for k, v in agent.items() if k.startswith("mean/")}
    first, second = metrics["group_level_metrics"]
    assert (first["_ng_task_index"], first["num_rollouts"], first["mean/reward"]) == (0, 2, 0.5)
    assert [info["rollout_id"] for info in second["rollout_infos"]] == ["1:0", "1:1", "1:2"]


async def test_the_default_agent_is_every_rows_agent_ref_failed_rows_included(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "t.jsonl", 6)
    lines = tasks.read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "agent_ref": {"name": "other"}})
    tasks.write_text("\n".join(lines) + "\n")
    backend = FakeBackend(fail_with=lambda r: GenerationFailed("timeout", "slow") if r.task_index == 5 else None)
    settings = CollectSettings(tasks, tmp_path / "o.jsonl", row_defaults={"agent_ref": {"name": "a"}})
    await Collector(settings, backend, ExactMatchVerifier(), SemaphoreStrategy(2)).run()
    written = {row["task_index"]: row for row in map(json.loads, (tmp_path / "o.jsonl").read_text().splitlines())}
    assert {t: row["agent_ref"]["name"] for t, row in written.items()} == {0: "other", **{t: "a" for t in range(1, 6)}}
    assert written[5]["status"] == "failed"
    assert [call.row["agent_ref"]["name"] for call in sorted(backend.calls, key=lambda c: c.task_index)][:2] == [
        "other", "a",
    ]  # fmt: skip


def test_the_aggregate_metrics_say_how_many_lines_they_skipped(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"reward": 1}\n{cut\n{cut\n')
    warnings: list[str] = []
    assert list(read_rows(path, warnings.append)) == [{"reward": 1}]
    (warning,) = warnings
    assert "skipped 2 lines that are not a rollout row" in warning and "r.jsonl:2:" in warning
    assert "aggregate metrics are computed from the other rows" in warning
