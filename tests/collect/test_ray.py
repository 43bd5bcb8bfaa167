"""The ``ray`` launcher on a local Ray cluster started by the command (``@pytest.mark.ray``).

Ray 2.60 turns on token authentication for new local clusters, and a driver with no address
attaches to any cluster it finds: the command passes ``address="local"`` when no
``+ray_address`` is given, and these tests turn authentication off for their own cluster.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from gymbench.errors import GymbenchError
from gymbench.record import load_record

from ..rollout.test_dataset import write_tasks
from .test_collect_cli import FAST_SIM, gymbench
from .test_sharded_collect import collect_args, pairs

RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="ray is not installed: pip install 'gymbench[ray]'"
)


@pytest.mark.ray
@needs_ray
def test_shards_as_ray_tasks_with_rows_streamed_through_the_object_store(tmp_path: Path) -> None:
    """Object-store transfer forced (the path a cluster without a shared file system takes)."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", 20)
    out = tmp_path / "out.jsonl"
    args = collect_args(tasks, out, "+num_workers=2", "+launcher=ray", "+shard_transfer=object_store",
                        "+num_repeats=2", f"+results_dir={tmp_path / 'r'}", *FAST_SIM)  # fmt: skip
    done = gymbench(*args, env=RAY_ENV, timeout=300)
    assert done.returncode == 0, done.stderr
    assert sorted(pairs(out)) == [(t, r) for t in range(20) for r in range(2)]
    (benchmark,) = load_record(next((tmp_path / "r").glob("*/*_collect.json"))).benchmarks
    assert benchmark.params["launcher"] == "ray" and benchmark.extra["summary"]["completed"] == 40
    assert benchmark.extra["distribution"]["rows_travel_by"].startswith("Ray's object store")
    assert all(worker["nice"] is not None for worker in benchmark.extra["workers"])
    assert not list((tmp_path / "out.jsonl.shards").glob(".*.tmp"))  # no streamed shard left half-landed
    again = gymbench(*args, "+resume=true", env=RAY_ENV, timeout=300)  # the driver holds every shard whole
    assert again.returncode == 0, again.stderr
    summary = json.loads((tmp_path / "out.jsonl.metrics.json").read_text())["summary"]
    assert (summary["completed"], summary["skipped_from_resume"]) == (0, 40)
    assert sorted(pairs(out)) == [(t, r) for t in range(20) for r in range(2)]


def test_the_ray_launcher_without_ray_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from gymbench.collect.launch_ray import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(GymbenchError, match=r"pip install 'gymbench\[ray\]'"):
        import_ray()
