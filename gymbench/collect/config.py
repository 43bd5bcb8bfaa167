"""Settings of ``collect``, ``tune`` and ``diagnose``, with NeMo Gym's names where it has one.

:class:`ServerConfig` holds what the three commands share (where requests go, how they are
verified, where the record goes); each command's class adds its own, so ``--help`` lists only
settings that apply. Settings that other schemas take too are declared once, in groups these
classes inherit (the target's :class:`~gymbench.collect.target.TargetSettings` with the backends'
groups, the task range and run policy of :mod:`~gymbench.rollout.run_settings`), so the command
line stays flat. Range checks run when the settings are built (``__post_init__``), before any
server is started or file touched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gymbench.builtin.strategy_settings import OPEN_LOOP_STRATEGIES, Parallelism
from gymbench.collect.target import TargetSettings
from gymbench.errors import GymbenchError
from gymbench.rollout.latency import Slo
from gymbench.rollout.run_settings import RunPolicy, TaskRange
from gymbench.rollout.verification import VerifySettings
from gymbench.settings import (
    Foreign,
    Progress,
    RayCluster,
    ResultsStore,
    at_least,
    doc,
    one_of,
    require,
    safe_name,
)

LAUNCHERS = ("local", "ray")
SHARD_TRANSFERS = ("auto", "files", "object_store")
REPLICA_SUBSETS = ("all", "by_shard")


# Shared groups listed first among the bases (Progress, ResultsStore, RayCluster): --help shows them after
# the connection's settings, near the end where they always were.
@dataclass
class ServerConfig(Progress, ResultsStore, TargetSettings):
    input_jsonl_fpath: str | None = field(
        default=None,
        metadata=doc(
            "JSONL file of tasks (required)",
            path=True,
            run_neutral=True,
            flags=("-i", "--input", "--input-jsonl-fpath"),
            metavar="FILE",
        ),
    )
    strategy: str = field(
        default="semaphore",
        metadata=doc(
            "concurrency strategy plugin (tune and diagnose probe it at each parallelism: it must take "
            "num_samples_in_parallel)",
            run_neutral=True,
        ),
    )
    strategy_options: dict[str, Any] = field(
        default_factory=dict, metadata=doc("the strategy's own settings", run_neutral=True)
    )
    verifier: str = field(default="exact-match", metadata=doc("verifier plugin"))
    verifier_options: dict[str, Any] = field(default_factory=dict, metadata=doc("the verifier's own settings"))
    verifier_pool: str = field(
        default="auto",
        metadata=doc(
            "auto, inline, thread or process (auto: cheap verifiers inline, others in threads)", run_neutral=True
        ),
    )
    verifier_workers: int = field(default=4, metadata=doc("verification pool size", run_neutral=True))
    verify_cache_size: int | None = field(
        default=None,
        metadata=doc(
            "in-memory verdict cache entries (default 10000 for expensive verifiers, 0: off)", run_neutral=True
        ),
    )
    verify_cache_path: str | None = field(
        default=None, metadata=doc("SQLite file keeping verdicts across runs and resumes", path=True, run_neutral=True)
    )
    verify_fraction: float = field(default=1.0, metadata=doc("fast mode: verify this fraction of rollouts"))
    verify_first_n: int | None = field(default=None, metadata=doc("fast mode: verify the first N per task"))
    verify_only_cheap: bool = field(default=False, metadata=doc("fast mode: skip verifiers that are not cheap"))
    responses_create_params: dict[str, Any] = field(
        default_factory=dict,
        metadata=doc(
            "merged into every row's request, e.g. +responses_create_params.temperature=0.7",
            entry_flags={
                "--temperature": "temperature",
                "--top-p": "top_p",
                "--max-output-tokens": "max_output_tokens",
            },
        ),
    )
    save_results: bool = field(default=True, metadata=doc("save a results record under results_dir", run_neutral=True))
    run_name: str = field(default="collect", metadata=doc("name of the results record", run_neutral=True))

    def __post_init__(self) -> None:
        super().__post_init__()  # the groups' checks: connection, agent
        safe_name("run_name", self.run_name)
        at_least("verify_cache_size", self.verify_cache_size, 0)
        self.verify_settings()  # its own checks: pool, workers, fraction, first_n

    def verify_settings(self) -> VerifySettings:
        return VerifySettings(
            name=self.verifier,
            config=dict(self.verifier_options),
            pool=self.verifier_pool,
            workers=self.verifier_workers,
            cache_size=self.verify_cache_size,
            cache_path=self.verify_cache_path,
            fraction=self.verify_fraction,
            first_n=self.verify_first_n,
            only_cheap=self.verify_only_cheap,
        )


@dataclass
class CollectConfig(RayCluster, ServerConfig, TaskRange, Parallelism, RunPolicy):
    NOT_OFFERED: ClassVar[dict[str, Foreign]] = {
        "no_serve": Foreign("", takes_value=False),
        "prompt_config": Foreign("write the prompts into the rows' responses_create_params.input first"),
        "interleave_repeats": Foreign(
            "repeats are dispatched in input order; put the rows in the order you want them run", takes_value=False
        ),
        "agent_map": Foreign("route with +agent_name (every row) or each row's agent_ref"),
        "fan_out": Foreign("repeat the rows once per agent in the input, each with its agent_ref"),
        "num_repeats_add_seed": Foreign("set the seed in each row's responses_create_params", takes_value=False),
        "split": Foreign("name the split's JSONL file with --input"),
        "benchmark": Foreign("name the benchmark's JSONL file with --input"),
        "no_health_check": Foreign("", takes_value=False),
        "environment_server_routes": Foreign(
            "materialized tasks (task_id.taskset with task_input) are not offered: give flat rows, routed by agent"
        ),
    }
    """NeMo Gym's collection settings and ``gym eval run`` flags gymbench does not offer: each is one
    line saying what to do instead (``--no-serve`` and ``--no-health-check`` are accepted: gymbench never
    starts the servers and runs no rollout health checks)."""

    output_jsonl_fpath: str | None = field(
        default=None,
        metadata=doc(
            "where rollouts go (required)",
            path=True,
            run_neutral=True,
            flags=("-o", "--output", "--output-jsonl-fpath"),
            metavar="FILE",
        ),
    )
    resume_force: bool = field(
        default=False,
        metadata=doc("resume even when the settings or input differ from the first run's", run_neutral=True),
    )
    disable_aggregation: bool = field(
        default=False, metadata=doc("write no <stem>_aggregate_metrics.json (NeMo Gym's setting)", run_neutral=True)
    )
    failures_sidecar: bool = field(
        default=True,
        metadata=doc(
            "runs through NeMo Gym agents write failed rollouts to <stem>_failures.jsonl, as NeMo Gym 0.7.0 "
            "(false, and in sharded runs: in the output with status failed)",
            run_neutral=True,
        ),
    )
    """Sharded runs keep failed rows in their shards' files, and so in the merged output: the merge
    checks that every pair of the selection is in the shards' files."""
    # --- across workers (docs/distributed.md)
    num_workers: int = field(
        default=1,
        metadata=doc(
            "workers collecting shards at once (above 1: shards in OUT.shards/, then merged)", run_neutral=True
        ),
    )
    launcher: str = field(
        default="local", metadata=doc("local (processes on this machine) or ray (a Ray cluster)", run_neutral=True)
    )
    num_shards: int | None = field(
        default=None,
        metadata=doc("shards the tasks are split into (default 4 per worker, at most one per task)", run_neutral=True),
    )
    shard_attempts: int = field(
        default=3, metadata=doc("attempts per shard (a crashed or killed worker's shard)", run_neutral=True)
    )
    sim_per_worker: bool = field(
        default=False, metadata=doc("one simulated server per worker instead of one shared by all", run_neutral=True)
    )
    shard_transfer: str = field(
        default="auto",
        metadata=doc(
            "auto (files when workers share this file system, else rows through Ray), files, object_store",
            run_neutral=True,
        ),
    )
    replica_subset: str = field(
        default="all",
        metadata=doc(
            "with several base_url across workers: all (every shard over every replica) or by_shard (shard i "
            "over replicas i, i+g, ...; g = min(num_workers, replicas); docs/replicas.md)",
            run_neutral=True,
        ),
    )
    slo_ttft_ms: float | None = field(
        default=None,
        metadata=doc(
            "goodput: a rollout is good only with time to first token within this (streaming)", run_neutral=True
        ),
    )
    slo_e2e_ms: float | None = field(
        default=None,
        metadata=doc("goodput: a rollout is good only with its backend call within this", run_neutral=True),
    )
    slo_itl_ms: float | None = field(
        default=None,
        metadata=doc("goodput: a rollout is good only with its mean inter-token latency within this (streaming)",
                     run_neutral=True),
    )  # fmt: skip
    slo_tpot_ms: float | None = field(
        default=None,
        metadata=doc("goodput: a rollout is good only with its time per output token within this", run_neutral=True),
    )
    scrape_metrics: bool = field(
        default=True,
        metadata=doc(
            "read the server's Prometheus /metrics before and after the run into the record", run_neutral=True
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("slo_ttft_ms", "slo_e2e_ms", "slo_itl_ms", "slo_tpot_ms"):
            value = getattr(self, name)
            if value is not None:
                require(math.isfinite(value) and value > 0, name, value, "a finite number of milliseconds above 0")
        at_least("num_workers", self.num_workers, 1, 4096)
        one_of("launcher", self.launcher, LAUNCHERS)
        at_least("num_shards", self.num_shards, 1, 1 << 20)
        at_least("shard_attempts", self.shard_attempts, 1, 100)
        one_of("shard_transfer", self.shard_transfer, SHARD_TRANSFERS)
        one_of("replica_subset", self.replica_subset, REPLICA_SUBSETS)
        if self.sharded and self.strategy in OPEN_LOOP_STRATEGIES:
            raise GymbenchError(
                f"strategy {self.strategy!r} sends requests on one schedule from one process; with "
                f"num_workers={self.num_workers} (or num_shards, or launcher=ray) every shard would send at the "
                "full rate. Collect open-loop runs with num_workers=1"
            )

    @property
    def sharded(self) -> bool:
        """Collected in shards by workers: more than one worker, shards asked for, or on Ray."""
        return self.num_workers > 1 or self.num_shards is not None or self.launcher == "ray"

    def slo(self) -> Slo:
        def seconds(ms: float | None) -> float | None:
            return None if ms is None else ms / 1e3

        return Slo(seconds(self.slo_ttft_ms), seconds(self.slo_e2e_ms), seconds(self.slo_itl_ms),
                   seconds(self.slo_tpot_ms))  # fmt: skip
