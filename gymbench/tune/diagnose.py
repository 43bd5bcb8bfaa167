"""What limits throughput: NeMo Gym's low-versus-high parallelism test, with evidence.

NeMo Gym's bottleneck guide: if throughput doubled or more going from low to high parallelism,
parallelism was the limit; under 20% gain, the model server or verification is; errors or OOM
mean too high. The
stage timings and the server's own queue say which of the slow parts it is: time queueing at the
server, in verification, waiting for a pooled connection, or a client that is itself busy (its
CPU near a full core, its event loop late).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gymbench.replica_figures import ReplicaSummary, replica_head
from gymbench.rollout.client_delay import CLIENT_CORES, CLIENT_LAG_S
from gymbench.tune import advice
from gymbench.tune.probe import ProbeResult
from gymbench.tune.server_load import HostLoad, ServerLoad, full_server, unseen_note

VARIANCE_SPREAD = 3.0
"""p99 ÷ p50 of latency per output token above which latency varies beyond what lengths explain."""

NEXT_STEPS = {
    "parallelism": "raise num_samples_in_parallel (run `gymbench tune` to find the knee)",
    "model server": "the model server is saturated: scale it out, tune its batching (max_num_seqs, KV cache), "
    "or accept this throughput; raising parallelism only queues requests",
    "verification": "simplify verification, run it in more workers (+verifier_workers, +verifier_pool=process), "
    "cache verdicts (+verify_cache_path), or verify a sample (+verify_fraction)",
    "connection pool": "raise global_aiohttp_connector_limit / global_aiohttp_connector_limit_per_host",
    "client": "the collecting process itself is the limit: run several collectors on shards (+start_idx/+end_idx), "
    "install uvloop, or use a faster machine",
    "too high": "lower num_samples_in_parallel to a stable level",
    "agent server": "the agent server fills its core first (a full core, or the most CPU per rollout on a host "
    "with no CPU left): run more agent workers or replicas, or make its per-request work cheaper; raising "
    "parallelism only queues requests at it",
    "resources server": "the resources server fills its core first (session seeding, tool calls, /verify): run "
    "more of its workers or replicas, or make those calls cheaper",
    "model adapter": "NeMo Gym's model adapter fills its core before the model server is busy: run more of its "
    "workers or replicas in front of the same model server",
    "environment server": "the environment server fills its core first: run more of its workers or replicas",
    "slow replica": "one model replica is slower than the others (named above): look at its GPU, its slots and its "
    "load from others; with sticky or round-robin routing it holds back every rollout sent to it, "
    "+routing=least-in-flight sends it less",
    "replicas full": "every model replica is saturated evenly: add replicas, or tune each one's batching; raising "
    "parallelism only queues requests",
    "unbalanced routing": "the replicas answer alike but some get more requests than others: +routing=least-in-flight "
    "or round-robin spreads them (sticky pins each rollout to one replica, uneven when rollouts differ in length)",
}
IMBALANCE_LIMIT = 1.3
"""Most requests on one replica ÷ the mean over the replicas, above which routing is called
unbalanced (when no replica is slow): round-robin and least-in-flight keep it within a few percent
of 1.0; 1.3 is one replica carrying 30% more than its share."""


@dataclass
class Diagnosis:
    verdict: str
    gain: float
    low: ProbeResult
    high: ProbeResult
    evidence: list[str] = field(default_factory=list)
    symptoms: list[str] = field(default_factory=list)
    backend_kind: str = advice.MODEL_SERVER
    server: dict[str, object] | None = None
    """The server's /metrics as the probe read it (see ``TuneResult.server``)."""
    servers: list[ServerLoad] = field(default_factory=list)
    """Each NeMo Gym server's CPU over the high probe (empty for a backend with no head server)."""
    replicas: ReplicaSummary | None = None
    """Each model replica's figures over both probes (several ``base_url``), or None."""

    @property
    def next_step(self) -> str:
        return advice.next_step(self.verdict, self.backend_kind, NEXT_STEPS)


def stage_share(probe: ProbeResult, stage: str) -> float:
    """A stage's share of a rollout's time once it holds its slot.

    The backend's stages nest (``ttft`` lies inside ``generation``), so they are not summed: the
    whole is the rollout's ``total`` less its ``slot_wait``, and whatever no stage names (the
    writer, the collector's own work) counts in the whole too.
    """
    stages = probe.stage_mean_s
    whole = (stages.get("total") or 0.0) - (stages.get("slot_wait") or 0.0)
    if whole <= 0:
        whole = sum(stages.get(name) or 0.0 for name in ("connection_wait", "generation", "verification"))
    value = stages.get(stage) or 0.0
    return min(1.0, value / whole) if whole > 0 else 0.0


def diagnose(
    low: ProbeResult,
    high: ProbeResult,
    error_bound: float = 0.05,
    servers: Sequence[ServerLoad] = (),
    host: HostLoad | None = None,
    replicas: ReplicaSummary | None = None,
) -> Diagnosis:
    """The verdict; ``servers`` (NeMo Gym's, over the high probe) can name one of them as the full
    one, and ``replicas`` (several model replicas) say which of them is the limit."""
    gain = high.rollouts_per_s / low.rollouts_per_s if low.rollouts_per_s > 0 else float("inf")
    evidence = [
        f"throughput {low.rollouts_per_s:.2f}/s at {low.parallelism} → {high.rollouts_per_s:.2f}/s at "
        f"{high.parallelism} ({gain:.2f}×)"
    ]
    symptoms = find_symptoms(high)
    if high.error_rate > error_bound:
        evidence.append(f"error rate {high.error_rate:.1%} at {high.parallelism}: {high.failure_kinds}")
        return Diagnosis("too high", gain, low, high, evidence, symptoms)
    verification = stage_share(high, "verification")
    pool = stage_share(high, "connection_wait")
    latency_growth = _latency_growth(low, high)
    evidence += [
        f"verification takes {verification:.0%} of each rollout's time, waiting for a connection {pool:.0%}",
        f"request latency grew {latency_growth:.2f}× while parallelism grew {high.parallelism / low.parallelism:.1f}×",
        f"client CPU {high.client_cpu_cores:.2f} cores, event-loop lag p99 {high.loop_lag_p99_s * 1e3:.1f} ms",
    ]
    if high.server_waiting_max is not None:
        evidence.append(f"server queue: up to {high.server_waiting_max:.0f} requests waiting (its /metrics)")
    evidence += server_evidence(high, servers, host)
    if gain >= parallelism_threshold(high.parallelism / low.parallelism):
        verdict = "parallelism"
    else:
        full = full_server(servers, high.server_waiting_max, host)
        verdict = _slow_part(verification, pool, high, full, seen=any(s.cpu_s is not None for s in servers))
    if replicas is not None and len(replicas["replicas"]) > 1:
        evidence.append(replica_head(replicas))  # the table itself follows the evidence (diagnosis_text)
        if verdict == "model server":
            verdict = replica_verdict(replicas)
    return Diagnosis(verdict, gain, low, high, evidence, symptoms, servers=list(servers), replicas=replicas)


def replica_verdict(replicas: ReplicaSummary) -> str:
    """Which of the model replicas is the limit, once the model server is: one out of line (the
    straggler, by latency or by its share of the completions), requests spread unevenly over
    replicas that answer alike, or all of them full."""
    if replicas["straggler"] is not None:
        return "slow replica"
    imbalance = replicas["imbalance"]
    if imbalance is not None and imbalance > IMBALANCE_LIMIT:
        return "unbalanced routing"
    return "replicas full"


def server_evidence(high: ProbeResult, servers: Sequence[ServerLoad], host: HostLoad | None = None) -> list[str]:
    """Per server at the high parallelism: CPU per rollout and share of a core, the driver's beside them."""
    if not servers:
        return []
    per_rollout = 1e3 * high.client_cpu_cores * high.elapsed_s / max(high.rollouts, 1)
    lines = [load.line() for load in servers]
    lines.append(f"driver (gymbench): {per_rollout:.2f} ms CPU per rollout, {high.client_cpu_cores:.0%} of a core")
    if host is not None:
        lines.append(host.line())
    note = unseen_note(servers)
    return lines + ([note] if note else [])


def parallelism_threshold(ratio: float) -> float:
    """The gain that names parallelism the limit: half the ratio, up to 2x (NeMo Gym's bottleneck
    guide: "doubled or more"), and at least 1.2x (its "barely changed": under 20%).

    Half the ratio alone is 1.0x for a doubling, i.e. any gain at all: llama.cpp's 64 slots read
    "parallelism" at 1.02x from 64 to 128 clients, where the server was the limit. A doubling from
    one client to two on llama.cpp gains 1.4-1.8x, short of the guide's 2x, and is parallelism.
    """
    return min(2.0, max(1.2, 0.5 * ratio))


def _slow_part(
    verification: float, pool: float, high: ProbeResult, full: ServerLoad | None = None, seen: bool = False
) -> str:
    """The stage that takes the time first, then a NeMo Gym server at a full core, then a busy
    client, then the server. Where each server's CPU was ``seen``, the client is judged by its own
    CPU alone: its late event loop says only that the host was busy.

    A stage's share (waiting for a connection, verifying) is specific evidence; a late event loop
    is not (a machine loaded by others makes every loop late, which made a tiny connection pool
    read "client"), so the client is judged only when no stage explains the time.
    """
    if pool >= 0.3:
        return "connection pool"
    if verification >= 0.3:
        return "verification"
    if full is not None:
        return full.server.role
    if high.client_cpu_cores >= CLIENT_CORES:
        return "client"
    if not seen and not server_queued(high) and high.loop_lag_p99_s >= CLIENT_LAG_S:
        return "client"
    return "model server"


QUEUED_SHARE = 0.25
"""A model server whose queue held at least this share of the high probe's parallelism is full:
the requests wait there, so the client sends them fast enough whatever its event loop's lag."""


def server_queued(high: ProbeResult) -> bool:
    """The model server's own queue (``/metrics``, summed over replicas) held a quarter of the
    requests open at once: a drift-free sign that the server, not a late client, is the limit.

    Three llama.cpp replicas on the 2-core machine the client shares (2026-11-29): 0.03 client
    cores, event-loop lag p99 410 ms (the servers took the cores), up to 22 of 24 requests waiting
    in the servers' queues; the late loop alone read "client"."""
    return high.server_waiting_max is not None and high.server_waiting_max >= QUEUED_SHARE * high.parallelism


def _latency_growth(low: ProbeResult, high: ProbeResult) -> float:
    if not low.latency_p50_s or not high.latency_p50_s:
        return float("nan")
    return high.latency_p50_s / low.latency_p50_s


def find_symptoms(probe: ProbeResult) -> list[str]:
    """NeMo Gym's tuning guide's table of over-parallelism symptoms, as far as they can be read."""
    found = []
    kinds = probe.failure_kinds
    if kinds.get("timeout"):
        found.append(f"timeouts ({kinds['timeout']}): backend queue overflow, reduce parallelism")
    if kinds.get("rate_limited"):
        found.append(f"429s after retries ({kinds['rate_limited']}): rate limits, reduce parallelism")
    if any("memory" in kind for kind in kinds):
        found.append("out-of-memory errors on the backend: reduce parallelism")
    variance = latency_variance(probe)
    if variance is not None:
        found.append(variance)
    found.append("GPU utilisation: not readable from this server (no GPU metrics at /metrics)")
    return found


def latency_variance(probe: ProbeResult) -> str | None:
    """High latency variance from queueing: judged per output token, so that lengths alone never count.

    A request's latency is its queueing plus about one step per output token; with exponential
    output lengths raw latency's p99 is many times its p50 with no queue at all, which is not a
    reason to lower parallelism. Divided by (output tokens + 1), latency is nearly constant when
    nothing queues and spreads when a wait unrelated to length is added: that is the symptom.
    Without token counts, raw latency is judged, and only when the server's queue was seen non-empty.
    """
    if probe.per_token_p50_s and probe.per_token_p99_s:
        spread = probe.per_token_p99_s / probe.per_token_p50_s
        if spread <= VARIANCE_SPREAD:
            return None
        queue = f"; the server's queue held up to {probe.server_waiting_max:.0f}" if probe.server_waiting_max else ""
        return (
            f"high latency variance beyond what output lengths explain (latency per output token p99 "
            f"{probe.per_token_p99_s * 1e3:.1f} ms vs p50 {probe.per_token_p50_s * 1e3:.1f} ms{queue}): "
            "request queuing, reduce parallelism"
        )
    queued = probe.server_waiting_max is not None and probe.server_waiting_max > 0
    if (
        probe.latency_p50_s
        and probe.latency_p99_s
        and probe.latency_p99_s > VARIANCE_SPREAD * probe.latency_p50_s
        and queued
    ):
        return (
            f"high latency variance (p99 {probe.latency_p99_s:.2f}s vs p50 {probe.latency_p50_s:.2f}s) with "
            f"up to {probe.server_waiting_max:.0f} requests waiting at the server: request queuing, reduce parallelism"
        )
    return None
