"""Every setting of ``gymbench train``, read like every other command's (``+key=value``,
``--key value``, ``--config FILE``). No torch here: settings are checked before torch is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gymbench.settings import Progress, RayCluster, ResultsStore, SaveRecord, at_least, doc, one_of, require
from gymbench.train.config import CUDA_TIMINGS, DEFAULT_MARGIN, GRPO_VARIANTS, STEPS, TRIAL_ALLOCATORS, StepSettings
from gymbench.train.lengths import LENGTH_DISTRIBUTIONS

FIND_BATCH = ("search", "halve")
DP_LAUNCHERS = ("torchrun", "ray")
DIST_BACKENDS = ("gloo", "nccl")
LARGEST = 2**31 - 1
"""torch takes sizes and thread counts as C integers: past this an overflow error, not a benchmark."""
SEARCH_SETTINGS = ("memory_budget_mib", "memory_fraction", "max_batch", "tolerance", "margin", "verify_runs",
                   "trial_steps", "guided", "trial_allocator", "colocated_share")  # fmt: skip
"""What defines a batch-size search's answer: in the record id only with --find-batch."""
DP_SETTINGS = ("launcher", "dist_backend", "cluster")
"""What defines a data-parallel run: in the record id only with --dp above 1."""
SHAPES = ("batch", "seq_len", "accumulation", "steps", "max_batch", "trial_steps", "group_size")


MAX_LR = 1000.0
"""The largest ``+lr`` accepted: beyond any rate that trains, and far below where torch overflows."""


@dataclass
class ClusterSettings:
    """NeMo RL's ``cluster`` names: ranks are ``num_nodes`` x ``gpus_per_node`` (on a CPU: processes per node)."""

    num_nodes: int = 1
    gpus_per_node: int | None = None


# The groups come first among the bases so that --help lists them after the step's own settings.
@dataclass
class TrainSettings(RayCluster, Progress, ResultsStore, SaveRecord, StepSettings):
    """The step's settings (:class:`~gymbench.train.config.StepSettings`), and how the run measures it,
    searches the largest batch, spreads over ranks and saves its record."""

    # --- model
    size: str = field(default="small", metadata=doc("size preset: tiny, small or base"))
    model_options: dict[str, Any] = field(
        default_factory=dict, metadata=doc("model options over the preset, e.g. +model_options.layers=8")
    )
    allow_slow_fp16: bool = field(
        default=False, metadata=doc("keep the given shapes for fp16 on a CPU", run_neutral=True)
    )
    # --- measurements
    memory: bool = field(default=True, metadata=doc("run the memory pass (--no-memory skips it)", run_neutral=True))
    flops: bool = field(default=True, metadata=doc("count FLOPs for MFU (--no-flops skips it)", run_neutral=True))
    peak_tflops: float | None = field(
        default=None, metadata=doc("device peak for MFU when gymbench does not know it", run_neutral=True)
    )
    leak_bound_mib_per_step: float = field(
        default=1.0, metadata=doc("memory growth per step (robust slope) that flags a leak", run_neutral=True)
    )
    profile_trace: str | None = field(
        default=None,
        metadata=doc(
            "write a torch.profiler Chrome trace of one step here", path=True, run_neutral=True, was="profile"
        ),
    )
    # --- largest batch (OOM backoff)
    find_batch: str | None = field(
        default=None,
        metadata=doc("search: grow until a real OOM, then narrow; halve: halve-and-retry from batch"),
    )
    memory_budget_mib: float = field(default=1024.0, metadata=doc("CPU: address space above baseline"))
    memory_fraction: float = field(default=0.9, metadata=doc("GPU: share of memory allowed"))
    max_batch: int = field(default=1 << 16, metadata=doc("largest batch the search tries"))
    tolerance: float = field(default=0.03, metadata=doc("stop when fit and failure are this close"))
    margin: float = field(
        default=DEFAULT_MARGIN,
        metadata=doc("share of the memory budget the chosen batch leaves unused in every verification run"),
    )
    colocated_share: float = field(
        default=0.0,
        metadata=doc(
            "GPU: share of memory a colocated inference engine will take, not in use yet (NeMo RL's "
            "gpu_memory_utilization, e.g. 0.6); 0 when the engine already runs (its memory is counted)"
        ),
    )
    verify_runs: int = field(default=3, metadata=doc("fresh runs of the chosen size", was="verify"))
    trial_steps: int = field(default=2, metadata=doc("training steps per trial"))
    guided: bool = field(default=True, metadata=doc("use trial memory to guide the search (--no-guided: bisect)"))
    trial_allocator: str = field(
        default="default",
        metadata=doc("CPU trials' malloc settings: default (a user's process) or fixed (gymbench's thresholds)"),
    )
    # --- data parallel (docs/distributed.md)
    dp: int = field(default=1, metadata=doc("data-parallel ranks (processes), each with batch/dp samples"))
    launcher: str = field(default="torchrun", metadata=doc("with --dp: torchrun (this machine) or ray"))
    dist_backend: str = field(default="gloo", metadata=doc("gloo (CPU) or nccl (one GPU per rank)"))
    cluster: ClusterSettings = field(
        default_factory=ClusterSettings,
        metadata=doc("NeMo RL's +cluster.num_nodes=N +cluster.gpus_per_node=G: dp = N x G"),
    )
    rank_hang_s: float = field(
        default=30.0,
        metadata=doc(
            "with --dp: a rank is hung when no rank progresses for this long (s); raise it above one step's "
            "longest phase",
            run_neutral=True,
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()  # the groups': save
        if self.find_batch is not None:
            one_of("find_batch", self.find_batch, FIND_BATCH)
        require(self.memory_budget_mib > 0, "memory_budget_mib", self.memory_budget_mib, "a size above 0")
        require(0 < self.memory_fraction <= 1, "memory_fraction", self.memory_fraction, "a share in (0, 1]")
        share, below = self.colocated_share, f"a share in [0, memory_fraction={self.memory_fraction:g})"
        require(0 <= share < self.memory_fraction, "colocated_share", share, below)
        for name in SHAPES:
            at_least(name, getattr(self, name), 1, LARGEST)
        at_least("warmup", self.warmup, 0, LARGEST)
        at_least("base_batch", self.base_batch, 1, LARGEST)
        at_least("verify_runs", self.verify_runs, 0, LARGEST)
        at_least("threads", self.threads, 1, 4096)
        at_least("seed", self.seed, 0, 2**64 - 1)  # torch's seeds are 64-bit
        # Past ~3e38 torch cannot hold the rate in a float32 and fails mid-run; 1000 is far past any real one.
        require(0 <= self.lr <= MAX_LR, "lr", self.lr, f"a learning rate from 0 to {MAX_LR:g}")
        require(self.peak_tflops is None or self.peak_tflops > 0, "peak_tflops", self.peak_tflops, "above 0")
        bound = self.leak_bound_mib_per_step
        require(bound >= 0, "leak_bound_mib_per_step", bound, "0 or more")
        one_of("trial_allocator", self.trial_allocator, TRIAL_ALLOCATORS)
        one_of("step", self.step, STEPS)
        one_of("grpo", self.grpo, GRPO_VARIANTS)
        one_of("cuda_timing", self.cuda_timing, CUDA_TIMINGS)
        at_least("updates_per_batch", self.updates_per_batch, 1, 4096)
        if self.logprob_batch is not None:
            at_least("logprob_batch", self.logprob_batch, 1, LARGEST)
        one_of("lengths", self.lengths, LENGTH_DISTRIBUTIONS)
        if self.checkpoint_ratio is not None:
            require(0 <= self.checkpoint_ratio <= 1, "checkpoint_ratio", self.checkpoint_ratio, "a share in [0, 1]")
        self._check_data_parallel()

    def _check_data_parallel(self) -> None:
        at_least("dp", self.dp, 1, 4096)
        require(self.rank_hang_s > 0, "rank_hang_s", self.rank_hang_s, "seconds above 0")
        one_of("launcher", self.launcher, DP_LAUNCHERS)
        one_of("dist_backend", self.dist_backend, DIST_BACKENDS)
        at_least("cluster.num_nodes", self.cluster.num_nodes, 1, 4096)
        if self.cluster.gpus_per_node is not None:
            at_least("cluster.gpus_per_node", self.cluster.gpus_per_node, 1, 1024)
            ranks = self.cluster.num_nodes * self.cluster.gpus_per_node
            expected = f"{ranks} (cluster.num_nodes x cluster.gpus_per_node) or unset"
            require(self.dp in (1, ranks), "dp", self.dp, expected)
            self.dp = ranks  # the ranks the cluster names
        if self.dp == 1:
            return
        nodes = self.cluster.num_nodes
        one_node = "1 with torchrun, which starts ranks on this machine only (use --launcher ray across nodes)"
        require(self.launcher == "ray" or nodes == 1, "cluster.num_nodes", nodes, one_node)
        share = self.dp * self.accumulation
        whole = f"a multiple of dp x accumulation ({share}): each rank takes batch/dp"
        require(self.batch % share == 0, "batch", self.batch, whole)
        plain = self.step == "lm" and self.lengths == "fixed" and not self.packing and self.rollouts is None
        require(plain, "dp", self.dp, "1 for the RL step and variable or packed lengths (DDP runs the fixed LM step)")
        require(self.find_batch is None, "dp", self.dp, "1 with find_batch (the search runs in one process)")
