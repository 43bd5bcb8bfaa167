"""What limits throughput: the seeds' low-versus-high parallelism test, with evidence.

Seed ``002_…``: if throughput doubled or more going from low to high parallelism, parallelism was
the limit; under 20% gain, the model server or verification is; errors or OOM mean too high. The
stage timings and the server's own queue say which of the slow parts it is: time queueing at the
server, in verification, waiting for a pooled connection, or a client that is itself busy (its
CPU near a full core, its event loop late).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gymbench.tuning import advice
from gymbench.tuning.probe import ProbeResult

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
}


@dataclass
class Diagnosis:
    verdict: str
    gain: float
    low: ProbeResult
    high: ProbeResult
    evidence: list[str] = field(default_factory=list)
    symptoms: list[str] = field(default_factory=list)
    backend_kind: str = advice.MODEL_SERVER

    @property
    def next_step(self) -> str:
        return advice.next_step(self.verdict, self.backend_kind, NEXT_STEPS)


def stage_share(probe: ProbeResult, stage: str) -> float:
    stages = probe.stage_mean_s
    total = (stages.get("generation") or 0) + (stages.get("connection_wait") or 0) + (stages.get("verification") or 0)
    value = stages.get(stage) or 0.0
    return value / total if total > 0 else 0.0


def diagnose(low: ProbeResult, high: ProbeResult, error_bound: float = 0.05) -> Diagnosis:
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
    ideal = high.parallelism / low.parallelism
    if gain >= min(2.0, 0.5 * ideal):
        return Diagnosis("parallelism", gain, low, high, evidence, symptoms)
    return Diagnosis(_slow_part(verification, pool, high), gain, low, high, evidence, symptoms)


def _slow_part(verification: float, pool: float, high: ProbeResult) -> str:
    if high.client_cpu_cores >= 0.8 or high.loop_lag_p99_s >= 0.05:
        return "client"
    if pool >= 0.3:
        return "connection pool"
    if verification >= 0.3:
        return "verification"
    return "model server"


def _latency_growth(low: ProbeResult, high: ProbeResult) -> float:
    if not low.latency_p50_s or not high.latency_p50_s:
        return float("nan")
    return high.latency_p50_s / low.latency_p50_s


def find_symptoms(probe: ProbeResult) -> list[str]:
    """Seed ``001_…``'s table of over-parallelism symptoms, as far as they can be read."""
    found = []
    kinds = probe.failure_kinds
    if kinds.get("timeout"):
        found.append(f"timeouts ({kinds['timeout']}): backend queue overflow, reduce parallelism")
    if kinds.get("rate_limited"):
        found.append(f"429s after retries ({kinds['rate_limited']}): rate limits, reduce parallelism")
    if any("memory" in kind for kind in kinds):
        found.append("out-of-memory errors on the backend: reduce parallelism")
    if probe.latency_p50_s and probe.latency_p99_s and probe.latency_p99_s > 3 * probe.latency_p50_s:
        found.append(
            f"high latency variance (p99 {probe.latency_p99_s:.2f}s vs p50 {probe.latency_p50_s:.2f}s): "
            "request queuing, reduce parallelism"
        )
    found.append("GPU utilisation: not readable from this server (no GPU metrics at /metrics)")
    return found
