"""Data-parallel training steps: DDP with gloo at world size 2 on CPU, started by torchrun (and by
Ray actors in the ``ray``-marked test), the replicas identical after synced steps."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gymbench import Recorder, load_record
from gymbench.cli import main
from gymbench.errors import GymbenchError
from gymbench.settings import build_settings
from gymbench.testing import make_plugins
from gymbench.train.data_parallel import summarise
from gymbench.train.execute import train
from gymbench.train.settings import TrainSettings

SMALL = ["model=mlp", "size=tiny", "batch=8", "steps=3", "warmup=1", "threads=1", "progress=false"]


def test_two_gloo_ranks_under_torchrun_keep_identical_replicas(tmp_path: Path, capsys) -> None:
    code = main(["train", *(f"+{item}" for item in SMALL), "--dp", "2", "--save", "dp2",
                 "--results-dir", str(tmp_path)])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "data parallel 2 ranks (torchrun, gloo), 1 threads and 4 samples per rank" in out
    assert "bit-identical after synced steps" in out
    (benchmark,) = load_record(next(tmp_path.glob("*/*_dp2.json"))).benchmarks
    assert benchmark.name == "train.dp" and benchmark.params["dp"] == 2
    setup = benchmark.extra["data_parallel"]
    assert setup["replicas_identical"] is True and [rank["rank"] for rank in setup["ranks"]] == [0, 1]
    assert {rank["torch_threads"] for rank in setup["ranks"]} == {1}
    assert len(benchmark.metrics["step_time"].samples) == 3
    for name in ("allreduce_exposed_share", "allreduce_time", "scaling_efficiency", "tokens_per_s_per_rank"):
        assert name in benchmark.metrics
    assert setup["gradient_bytes"] > 0


@pytest.mark.ray
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed: pip install 'gymbench[ray]'")
def test_the_same_rank_code_under_ray_actors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    settings = build_settings(TrainSettings, [*SMALL, "dp=2", "launcher=ray"])
    recorder = Recorder()
    outcome = train(settings, make_plugins(), recorder)
    setup = recorder.extra["data_parallel"]
    assert outcome.result.params["launcher"] == "ray" and setup["replicas_identical"] is True
    assert len({rank["pid"] for rank in setup["ranks"]}) == 2
    assert all(rank["nice"] is not None and rank["omp_num_threads"] == "1" for rank in setup["ranks"])


def test_one_slow_rank_sets_each_steps_time_and_differing_replicas_show() -> None:
    def rank(steps: list[float], digest: str) -> dict:
        return {"step_s": steps, "tokens_per_step": 100, "paired_sync_s": [2.0, 2.0], "paired_no_sync_s": [1.5, 1.0],
                "allreduce_s": [0.1, 0.3], "gradient_bytes": 8, "reference_step_s": [1.0, 1.0],
                "parameter_digest": digest}  # fmt: skip

    figures = summarise([rank([1.0, 4.0], "a"), rank([2.0, 2.0], "b")])
    assert figures["step_s"] == [2.0, 4.0]
    assert figures["tokens_per_s"] == [100.0, 50.0]
    assert figures["allreduce_exposed_share"] == [0.25, 0.5]
    assert figures["scaling_efficiency"] == pytest.approx(75.0 / (2 * 100.0))
    assert figures["replicas_identical"] is False


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["dp=3", "batch=8"], "a multiple of dp x accumulation"),
        (["dp=2", "step=rl"], "DDP runs the fixed LM step"),
        (["dp=2", "launcher=mpi"], "setting 'launcher'"),
        (["cluster.num_nodes=2", "cluster.gpus_per_node=1"], "torchrun, which starts ranks on this machine only"),
        (["dp=4", "cluster.gpus_per_node=2"], r"2 \(cluster.num_nodes x cluster.gpus_per_node\)"),
    ],
)
def test_data_parallel_settings_are_checked_first(settings: list[str], message: str) -> None:
    with pytest.raises(GymbenchError, match=message):
        build_settings(TrainSettings, settings)


def test_nccl_without_gpus_is_a_clear_error() -> None:
    import torch

    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has GPUs for nccl")
    settings = build_settings(TrainSettings, [*SMALL, "dp=2", "dist_backend=nccl"])
    with pytest.raises(GymbenchError, match="nccl needs one GPU per rank"):
        train(settings, make_plugins())


def test_cluster_names_give_the_ranks() -> None:
    settings = build_settings(TrainSettings, ["cluster.gpus_per_node=2", "batch=8"])
    assert settings.dp == 2
