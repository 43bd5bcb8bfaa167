"""Splitting one collection into shards, and what each shard's worker is told.

A shard is a contiguous range of task indices ``[start_idx, end_idx)`` collected into its own
file in ``OUT.shards/`` with resume always on, so a shard whose worker died is simply run again
and continues where its file ends. There are more shards than workers (4 per worker by
default): a slow or dead worker then holds up a small part of the run, not a quarter of it.

The plan is written to ``OUT.shards/plan.json`` on the first run and reused by every later run of
the same collection, so a rerun with another ``+num_workers`` continues the same shard files.
"""

from __future__ import annotations

import os
import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymbench.collect.config import CollectConfig
from gymbench.errors import GymbenchError
from gymbench.jsonio import read_json_file, write_json_atomic
from gymbench.rollout.dataset import TaskSlice, count_selected
from gymbench.settings import path_settings, settings_dict
from gymbench.types import JSONObject

SHARDS_PER_WORKER = 4


@dataclass(frozen=True)
class Shard:
    index: int
    start_idx: int
    end_idx: int
    path: str

    @property
    def tasks(self) -> int:
        return self.end_idx - self.start_idx


def shards_dir(output: str | os.PathLike[str]) -> Path:
    output = Path(output)
    return output.with_name(output.name + ".shards")


def selection_of(config: CollectConfig) -> TaskSlice:
    return TaskSlice(config.start_idx, config.end_idx, config.limit, config.num_repeats)


def plan_shards(config: CollectConfig) -> list[Shard]:
    """The shards of this collection: the saved plan when there is one, else a new one (saved)."""
    assert config.input_jsonl_fpath and config.output_jsonl_fpath
    selection = selection_of(config)
    rollouts = count_selected(config.input_jsonl_fpath, selection)
    if rollouts is None:
        raise GymbenchError(
            f"{config.input_jsonl_fpath}: is a pipe; collecting across workers splits the tasks by index, "
            "which needs a regular file. Write the tasks to a file first"
        )
    first, tasks = config.start_idx, rollouts // config.num_repeats
    directory = shards_dir(config.output_jsonl_fpath)
    wanted = {"start_idx": first, "tasks": tasks, "num_repeats": config.num_repeats}
    saved = _saved_bounds(directory / "plan.json", wanted)
    if saved is None:
        count = min(config.num_shards or SHARDS_PER_WORKER * config.num_workers, max(tasks, 1))
        bounds = [first + tasks * part // count for part in range(count + 1)]
        saved = [(start, end) for start, end in zip(bounds, bounds[1:], strict=False) if end > start]
        write_json_atomic(directory / "plan.json", {**wanted, "shards": saved})
    return [Shard(i, start, end, str((directory / f"shard-{i:05d}.jsonl").resolve())) for i, (start, end) in
            enumerate(saved)]  # fmt: skip


def _saved_bounds(path: Path, wanted: dict[str, int]) -> list[tuple[int, int]] | None:
    if not path.exists():
        return None
    plan = read_json_file(path, "shard plan")
    if not isinstance(plan, dict):
        raise _bad_plan(path, f"expected a JSON object, got {type(plan).__name__}")
    if {key: plan.get(key) for key in wanted} != wanted:
        raise GymbenchError(
            f"{path}: the shards there belong to another selection of tasks ({_described(plan)}, "
            f"now {_described(wanted)}); "
            f"continue that one with the same settings, or move {path.parent} away to start anew"
        )
    return _checked_bounds(path, plan.get("shards"), wanted["start_idx"], wanted["start_idx"] + wanted["tasks"])


def _checked_bounds(path: Path, shards: object, first: int, end: int) -> list[tuple[int, int]]:
    """The plan's shards as written by :func:`plan_shards`: ``[start, end)`` pairs of whole numbers
    that cover ``[first, end)`` in order, each non-empty. Anything else (a hand edit, a plan of
    another gymbench) would collect tasks twice, skip some, or ask a worker for a hundred million
    rollouts, so it is refused before anything runs."""
    if not isinstance(shards, list) or not shards and end > first:
        raise _bad_plan(path, f'"shards" must be a list of [start_idx, end_idx] pairs, got {reprlib.repr(shards)}')
    bounds, expected = [], first
    for number, pair in enumerate(shards):
        if not (isinstance(pair, list) and len(pair) == 2 and all(type(v) is int for v in pair)):
            raise _bad_plan(path, f"shard {number} must be a pair of whole numbers, got {reprlib.repr(pair)}")
        start, stop = pair
        if start != expected or not start < stop <= end:
            raise _bad_plan(
                path, f"shard {number} is [{start}, {stop}), but the shards must cover tasks {first} to {end - 1} "
                f"in order (this one from {expected}, ending by {end})"
            )  # fmt: skip
        bounds.append((start, stop))
        expected = stop
    if expected != end:
        raise _bad_plan(path, f"the shards end at task {expected}, but the selection runs to {end}")
    return bounds


def _bad_plan(path: Path, problem: str) -> GymbenchError:
    return GymbenchError(
        f"{path}: not a shard plan gymbench wrote ({problem}); move {path.parent} away to start anew "
        "(the rows in its shard files can be joined with gymbench merge-rollouts first)"
    )


def _described(plan: dict[str, Any]) -> str:
    """The selection a plan was made for, as a person reads it."""
    return f"{plan.get('tasks')} tasks from index {plan.get('start_idx')}, {plan.get('num_repeats')} repeats"


def shard_cooldowns(config: CollectConfig, shards: list[Shard]) -> dict[int, int]:
    """Each shard's ``cooldown_rollouts``: the cool-down is the last N rollouts of the whole
    selection, as in one process, so the last shard flags its own last ones, and the shard before
    it the rest, if N is more than the last shard holds; the other shards have none."""
    left, counts = config.cooldown_rollouts, {}
    for shard in reversed(shards):
        counts[shard.index] = min(left, shard.tasks * config.num_repeats)
        left -= counts[shard.index]
    return counts


def shard_settings(
    config: CollectConfig, shard: Shard, server: dict[str, Any], *, cooldown_rollouts: int
) -> JSONObject:
    """The settings one shard is collected with: its range, its file, resume on, nothing printed or saved.

    ``server`` names the shared simulator (``base_url``, ``model``) when the driver runs one;
    ``cooldown_rollouts`` is the shard's share of the selection's (:func:`shard_cooldowns`)."""
    settings = settings_dict(config)
    for key in path_settings(CollectConfig):  # absolute: a worker's working directory (on a Ray node) is not ours
        if settings.get(key):
            settings[key] = os.path.abspath(settings[key])
    settings.update(server)
    if config.replica_subset == "by_shard" and isinstance(settings.get("base_url"), list):
        settings["base_url"] = shard_replicas(settings["base_url"], shard.index, config.num_workers)
    settings.update(
        start_idx=shard.start_idx, end_idx=shard.end_idx, limit=None, output_jsonl_fpath=shard.path, resume=True,
        overwrite=False, progress=False, save_results=False, disable_aggregation=True, num_workers=1,
        launcher="local", num_shards=None, cooldown_rollouts=cooldown_rollouts, failures_sidecar=False,
    )  # fmt: skip
    return settings


def shard_replicas(base_urls: list[str], shard: int, workers: int) -> list[str]:
    """``+replica_subset=by_shard``: shard ``i`` routes over replicas ``i mod g``, ``i mod g + g``, ...
    with ``g = min(workers, replicas)``: the shards that run at once (workers take them in order)
    cover the replicas about evenly, each worker's requests go to its own part of the list, and
    every replica is in some group. Still a list when it holds one (the backend then serves it as
    one server and counts nothing, and the merged record takes that shard's figures from its
    rollouts)."""
    groups = max(min(workers, len(base_urls)), 1)
    return base_urls[shard % groups :: groups]


class ShardProgress:
    """One bar for the whole run. Workers report each shard's rollouts done so far (those found in
    its file included); the bar moves by the growth of each shard's best figure, so a shard that
    restarts (and first finds its earlier rows again) neither resets the bar nor counts twice."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, unit="rollout", desc="Collecting rollouts", disable=not enabled, mininterval=0.5)
        self.done: dict[int, int] = {}

    def report(self, shard: int, done: int) -> None:
        grown = done - self.done.get(shard, 0)
        if grown > 0:
            self.done[shard] = done
            self.bar.update(grown)

    def close(self) -> None:
        self.bar.close()
