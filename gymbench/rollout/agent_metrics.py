"""NeMo Gym's aggregate-metrics file, ``<stem>_aggregate_metrics.json``, beside a rollouts file.

``ng_collect_rollouts`` ends by POSTing each agent's rollouts, stripped of the heavy fields, to
that agent's ``/aggregate_metrics`` and writes one list entry per agent::

    [{"agent_ref": {"name": A}, "agent_metrics": {...}, "key_metrics": {...},
      "group_level_metrics": [{...per task...}]}]

Here are the pieces that need no server: which rows count (completed ones with an ``agent_ref``,
as NeMo Gym's main file holds only successes), the entries an agent is sent, and NeMo Gym's
baseline aggregation (its reward profiler's mean/max/min/median/std of every numeric field, per
agent and per task, ``key_metrics`` the ``mean/*`` ones) for when no agent computes them.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gymbench.jsonio import dumps, loads
from gymbench.rollouts_file import RolloutsFile

TASK, ROLLOUT = "_ng_task_index", "_ng_rollout_index"
HEAVY_FIELDS = (
    "response", "responses_create_params", "ng_agent_observations", "ng_model_call_capture", "ng_trajectory",
)  # fmt: skip
"""What NeMo Gym strips before sending rows to ``/aggregate_metrics`` (``response.usage`` stays)."""
GYMBENCH_FIELDS = (
    "task_index", "rollout_index", "attempt", "retries", "status", "timings", "usage", "verifier", "failure",
)  # fmt: skip
"""gymbench's bookkeeping: left out, so agents see the entries NeMo Gym would send and no
``mean/retries`` appears among the metrics."""
STATISTICS = ("mean", "max", "min", "median", "std")


def aggregate_metrics_path(output: Path) -> Path:
    """NeMo Gym's name for it: ``rollouts.jsonl`` -> ``rollouts_aggregate_metrics.json``."""
    return output.with_stem(output.stem + "_aggregate_metrics").with_suffix(".json")


def failures_path(output: Path) -> Path:
    """NeMo Gym 0.7.0's failures sidecar: ``rollouts.jsonl`` -> ``rollouts_failures.jsonl``, where a
    run through NeMo Gym agents writes its failed rollouts so the output holds only scored ones."""
    return output.with_name(output.stem + "_failures.jsonl")


class EncodedEntries:
    """One agent's entries as JSON texts in one buffer, the form they are sent in.

    No Python object per row outlives the reading, so memory stays near the text's size: kept
    as objects (or as one ``bytes`` each, which fragment the small-object heap between the rows
    parsed and freed) 100,000 rows took 260-390 MiB; in one buffer about their 36 MB of text."""

    def __init__(self) -> None:
        self.text = bytearray()
        self.starts = array("Q")

    def append(self, encoded: bytes) -> None:
        if self.starts:
            self.text += b","
        self.starts.append(len(self.text))
        self.text += encoded

    def __len__(self) -> int:
        return len(self.starts)

    def __iter__(self) -> Iterator[bytes]:
        ends = [*self.starts[1:], len(self.text) + 1]
        for start, end in zip(self.starts, ends, strict=True):
            yield bytes(self.text[start : end - 1])

    def json_array(self) -> bytes:
        return b"[" + self.text + b"]"


def agent_entries(rows: Iterable[Mapping[str, Any]]) -> dict[str, EncodedEntries]:
    """Completed rows with an agent, by agent name, stripped as NeMo Gym strips them."""
    by_agent: dict[str, EncodedEntries] = defaultdict(EncodedEntries)
    for row in rows:
        ref = row.get("agent_ref")
        name = ref.get("name") if isinstance(ref, Mapping) else None
        if not isinstance(name, str) or row.get("status", "ok") != "ok" or row.get("reward") is None:
            continue
        entry = {k: v for k, v in row.items() if k not in HEAVY_FIELDS and k not in GYMBENCH_FIELDS}
        usage = row.get("response", {}).get("usage") if isinstance(row.get("response"), Mapping) else None
        if usage:
            entry["response"] = {"usage": usage}
        by_agent[name].append(dumps(entry))
    return dict(by_agent)


def read_rows(path: Path, warn: Callable[[str], None]) -> Iterator[dict[str, Any]]:
    """The rows of a rollouts file, streamed. A line that is not a rollout row is passed over and
    ``warn`` is told how many were (the rollouts are already collected; the aggregate is made of
    the rows there are rather than failing the run at its end), the first one named."""
    rollouts = RolloutsFile(path)
    yield from rollouts.rows(on_bad="skip")
    note = rollouts.skipped_note()
    if note is not None:
        warn(f"{note}; the aggregate metrics are computed from the other rows")


def baseline_metrics(encoded: Iterable[bytes]) -> dict[str, Any]:
    """NeMo Gym's default aggregation of one agent's entries (what an agent without its own returns)."""
    rollouts: list[int] = []
    numbers: list[dict[str, float]] = []
    by_task: dict[int, list[int]] = defaultdict(list)
    for position, raw in enumerate(encoded):
        entry = loads(raw)
        by_task[int(entry.get(TASK, 0))].append(position)
        rollouts.append(int(entry.get(ROLLOUT, 0)))
        numbers.append(_numeric_fields(entry))
    agent_metrics = _describe(numbers)
    groups = [
        _task_group(task, [rollouts[i] for i in at], [numbers[i] for i in at]) for task, at in sorted(by_task.items())
    ]
    key_metrics = {key: value for key, value in agent_metrics.items() if key.startswith("mean/")}
    return {"agent_metrics": agent_metrics, "key_metrics": key_metrics, "group_level_metrics": groups}


def _numeric_fields(entry: Mapping[str, Any]) -> dict[str, float]:
    """Top-level numbers (booleans as 0/1) and ``response.usage``'s, as NeMo Gym's profiler reads them."""
    usage = entry.get("response", {}).get("usage") if isinstance(entry.get("response"), Mapping) else None
    found: dict[str, float] = {}
    for source in (usage if isinstance(usage, Mapping) else {}, entry):
        for key, value in source.items():
            if key not in (TASK, ROLLOUT) and isinstance(value, (int, float)):
                found[key] = float(value)
    return found


def _describe(numbers: list[dict[str, float]]) -> dict[str, float]:
    """``<statistic>/<field>`` over the rows that have the field; one value has a spread of 0."""
    fields = list(dict.fromkeys(key for row in numbers for key in row))
    columns = {name: np.array([row[name] for row in numbers if name in row]) for name in fields}
    described: dict[str, float] = {}
    for statistic in STATISTICS:
        for name, values in columns.items():
            described[f"{statistic}/{name}"] = _statistic(statistic, values)
    return described


def _statistic(statistic: str, values: np.ndarray) -> float:
    if statistic == "std":
        return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return float(getattr(np, statistic)(values))


def _task_group(task: int, rollouts: list[int], numbers: list[dict[str, float]]) -> dict[str, Any]:
    infos = [
        {"rollout_id": f"{task}:{rollout}", TASK: task, ROLLOUT: rollout, **values}
        for rollout, values in zip(rollouts, numbers, strict=True)
    ]
    return {
        TASK: task,
        **_describe(numbers),
        "num_rollouts": len(rollouts),
        "expected_num_rollouts": len(rollouts),
        "missing_num_rollouts": 0,
        "reward_profile_completion_pct": 100.0,
        "rollout_infos": sorted(infos, key=lambda info: info[ROLLOUT]),
    }
