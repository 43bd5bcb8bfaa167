"""``/metrics`` in Prometheus text format, with vLLM's metric names where vLLM has one.

Using vLLM's names (``vllm:num_requests_waiting`` ...) means a diagnosis that reads a real vLLM
server reads the simulator the same way. Simulator-only figures carry a ``gymbench_sim:`` prefix.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gymbench.sim.engine import Engine
from gymbench.sim.limits import FAULT_KINDS, FaultPlan


class ServerMetrics:
    def __init__(self, engine: Engine, faults: FaultPlan, model: str) -> None:
        self.registry = CollectorRegistry()
        labels = {"model_name": model}
        r = self.registry

        def gauge(name: str, doc: str, read: Callable[[], float]) -> None:
            Gauge(name, doc, ["model_name"], registry=r).labels(**labels).set_function(read)

        gauge("vllm:num_requests_running", "Sequences in the running batch.", lambda: len(engine.running))
        gauge("vllm:num_requests_waiting", "Requests waiting to be admitted.", lambda: len(engine.waiting))
        gauge(
            "vllm:gpu_cache_usage_perc",
            "KV-cache usage, 0-1 (0 when the cache is unlimited).",
            lambda: engine.kv_used / engine.config.kv_cache_tokens if engine.config.kv_cache_tokens else 0.0,
        )
        gauge("gymbench_sim:max_num_seqs", "Configured max_num_seqs.", lambda: engine.config.max_num_seqs)
        gauge(
            "gymbench_sim:num_requests_running_peak",
            "Most sequences ever running at once.",
            lambda: engine.stats.peak_running,
        )
        gauge("gymbench_sim:slowdown_factor", "Current warm-up/drift/collapse step multiplier.", self._slowdown)
        gauge("gymbench_sim:engine_steps", "Engine steps run so far.", lambda: engine.stats.steps)
        gauge("gymbench_sim:engine_busy_seconds", "Seconds of simulated step time.", lambda: engine.stats.busy_s)
        self._engine = engine
        self._prompt = Counter("vllm:prompt_tokens", "Prefilled prompt tokens.", ["model_name"], registry=r)
        self._generation = Counter("vllm:generation_tokens", "Generated tokens.", ["model_name"], registry=r)
        self.success = Counter(
            "vllm:request_success", "Finished requests.", ["model_name", "finished_reason"], registry=r
        )
        self.rejected = Counter(
            "gymbench_sim:requests_rejected", "Requests refused with 429/400/404.", ["reason"], registry=r
        )
        self.faults = Counter("gymbench_sim:faults_injected", "Faults injected by kind.", ["kind"], registry=r)
        for kind in FAULT_KINDS:
            self.faults.labels(kind=kind)
        for reason in ("queue_full", "rate_limit", "bad_request", "too_large", "model_not_found"):
            self.rejected.labels(reason=reason)
        self._labels = labels
        self._counted = (0, 0)

    def _slowdown(self) -> float:
        import asyncio

        try:
            return self._engine.slowdown(asyncio.get_running_loop().time())
        except RuntimeError:
            return 1.0

    def render(self) -> bytes:
        stats = self._engine.stats
        prompt_seen, generation_seen = self._counted
        self._prompt.labels(**self._labels).inc(stats.prompt_tokens - prompt_seen)
        self._generation.labels(**self._labels).inc(stats.generation_tokens - generation_seen)
        self._counted = (stats.prompt_tokens, stats.generation_tokens)
        return generate_latest(self.registry)

    def values(self) -> dict[str, float]:
        """What ``/metrics`` would show now, as :func:`sample_values` reads it."""
        return sample_values(self.render().decode())


def sample_values(text: str) -> dict[str, float]:
    """Every sample as ``name{label="v",...}`` → value (``_total`` suffix kept for counters)."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()) if k != "model_name")
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values
