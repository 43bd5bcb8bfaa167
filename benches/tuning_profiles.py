"""Simulator profiles for the tuning study (none of them a preset), their truth, and tuning runs.

Each profile is a simulated server whose true knee is computed by a dense grid of closed loops
(:mod:`tuning_truth`) and by the capacity formula (:func:`gymbench.sim.describe`). A tuning run
is ``gymbench tune``'s sweep or adaptive search against the profile's in-process engine on a
simulated clock, with the server's ``/metrics`` text readable as a real vLLM's would be (except
for the rate-limited profile, which stands for a hosted API and has none); its "wall time" is
the simulated time it took, which is what it would take against a server that fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuning_truth import dense_grid, sample_rows, true_curve, true_knee

from gymbench.collect.driver import Collection
from gymbench.engine_metrics import Counters
from gymbench.rollout.verification import VerifySettings
from gymbench.sim import InProcessBackend, SimConfig, describe, run_in_simulated_time
from gymbench.sim.endpoints import RESPONSES
from gymbench.sim.text import count_tokens
from gymbench.testing import make_plugins
from gymbench.tune.curves import KNEE_FRACTION, knee_of, throughput_at
from gymbench.tune.knee_search import SearchSettings
from gymbench.tune.probe import Prober
from gymbench.tune.rates import Precision
from gymbench.tune.sweep import Strategies, TuneResult, adaptive_search, doubling_sweep

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "gymbench" / "data" / "example_tasks.jsonl"
SAMPLE = 200
TRUTH_CACHE = ROOT / "benches" / "study" / "tuning_truth.json"


@dataclass(frozen=True)
class Profile:
    name: str
    settings: dict[str, Any]
    description: str
    start: int = 5
    metrics: bool = True
    """Whether the server's /metrics counters are readable (a hosted API has none)."""
    retries: int = 0
    """The client's retries on 429/5xx (the HTTP client's default is 5; a hosted API needs them)."""
    truth_completions: int = 2000
    """Completions per grid point at least: a KV cache full of exponential lengths drifts slowly."""

    def config(self, seed: int = 0) -> SimConfig:
        return SimConfig(**{**self.settings, "seed": seed})


PROFILES = {
    p.name: p
    for p in (
        Profile("u8", {"max_num_seqs": 8, "step_base_s": 0.025, "step_per_seq_s": 0.002,
                       "output_tokens_dist": "uniform", "output_tokens_mean": 24},
                "8 sequences, uniform lengths (mean 24)"),
        Profile("e24", {"max_num_seqs": 24, "step_base_s": 0.02, "step_per_seq_s": 0.0008,
                        "output_tokens_dist": "exponential", "output_tokens_mean": 32},
                "24 sequences, exponential lengths (mean 32)"),
        Profile("u40", {"max_num_seqs": 40, "step_base_s": 0.015, "step_per_seq_s": 0.0006,
                        "output_tokens_dist": "uniform", "output_tokens_mean": 40},
                "40 sequences, uniform lengths (mean 40)"),
        Profile("e96", {"max_num_seqs": 96, "step_base_s": 0.02, "step_per_seq_s": 0.0004,
                        "output_tokens_dist": "exponential", "output_tokens_mean": 32},
                "96 sequences, exponential lengths (mean 32)", start=8),
        Profile("u128", {"max_num_seqs": 128, "step_base_s": 0.012, "step_per_seq_s": 0.0002,
                         "output_tokens_dist": "uniform", "output_tokens_mean": 48},
                "128 sequences, uniform lengths (mean 48)", start=8),
        Profile("kv-e", {"max_num_seqs": 256, "kv_cache_tokens": 3200, "step_base_s": 0.02,
                         "step_per_seq_s": 0.0005, "output_tokens_dist": "exponential", "output_tokens_mean": 32},
                "KV-cache bound (3200 tokens), exponential lengths (mean 32)", truth_completions=40_000),
        Profile("collapse", {"max_num_seqs": 32, "step_base_s": 0.02, "step_per_seq_s": 0.0005,
                             "output_tokens_dist": "uniform", "output_tokens_mean": 16,
                             "collapse_threshold": 8, "collapse_slope": 1.0},
                "32 sequences; steps slow down once more than 8 requests wait (throughput falls)"),
        Profile("rate-limited", {"max_num_seqs": 512, "step_base_s": 0.03, "step_per_seq_s": 0.00002,
                                 "output_tokens_dist": "exponential", "output_tokens_mean": 24, "rpm_limit": 900},
                "a hosted API: 900 requests/minute in a token bucket that starts full, no /metrics",
                metrics=False, retries=5),
        Profile("compute", {"max_num_seqs": 64, "step_base_s": 0.001, "step_per_seq_s": 0.0008,
                            "output_tokens_dist": "uniform", "output_tokens_mean": 32},
                "compute-bound: 64 sequences, step 1 ms + 0.8 ms per sequence (llama.cpp's shape on one "
                "thread): throughput creeps up as p / (1.25 + p)", start=4),
    )
}  # fmt: skip
QUICK = "u8"


def prompt_tokens() -> float:
    rows = sample_rows(TASKS, SAMPLE)
    counts = [count_tokens(RESPONSES.parse({"model": "m", **r["responses_create_params"]}).prompt) for r in rows]
    return sum(counts) / len(counts)


@dataclass
class Truth:
    curve: dict[int, float]
    knee: float
    plateau: float
    formula_knee: float
    formula_plateau: float
    formula_saturation: int
    limited_by: str

    def share_at(self, parallelism: int) -> float:
        """True throughput at ``parallelism`` as a share of the true plateau."""
        curve = self.curve
        value = curve[parallelism] if parallelism in curve else throughput_at(curve, parallelism)
        return value / self.plateau


def formula(profile: Profile) -> tuple[float, float, int, str]:
    """(knee, plateau, saturation, limited by) from the capacity formula, with the study's prompts."""
    config = profile.config()
    capacity = describe(config, prompt_tokens=prompt_tokens())
    top = 4 * capacity.saturation_concurrency + 8
    curve = {n: capacity.throughput_at(config, n) for n in range(1, top + 1)}
    plateau = max(curve.values())
    return knee_of(curve, plateau), plateau, capacity.saturation_concurrency, capacity.limited_by


def compute_truth(profile: Profile) -> Truth:
    config = profile.config()
    f_knee, f_plateau, saturation, limited_by = formula(profile)
    unlimited = config.replace(rpm_limit=None, tpm_limit=None)
    limit = config.rpm_limit / 60 if config.rpm_limit else math.inf
    grid = dense_grid(
        f_knee, saturation if math.isfinite(limit) is False else math.ceil(f_knee), 4 * max(8, saturation)
    )
    if math.isfinite(limit):
        grid = dense_grid(f_knee, math.ceil(f_knee), 8 * math.ceil(f_knee))
    curve = true_curve(unlimited, sample_rows(TASKS, SAMPLE), grid, profile.truth_completions)
    curve = {p: min(x, limit) for p, x in curve.items()}  # a rate limit caps the sustained rate
    knee, plateau = true_knee(curve)
    return Truth(curve, knee, plateau, f_knee, f_plateau, saturation, limited_by)


def truth_for(profile: Profile, cache: Path | None = TRUTH_CACHE) -> Truth:
    """The profile's truth, from the cache when it holds this exact configuration."""
    key = json.dumps([profile.settings, profile.truth_completions], sort_keys=True)
    stored = json.loads(cache.read_text()) if cache is not None and cache.exists() else {}
    entry = stored.get(profile.name)
    if entry is not None and entry.get("key") == key:
        data = dict(entry["truth"])
        data["curve"] = {int(p): x for p, x in data["curve"].items()}
        return Truth(**data)
    truth = compute_truth(profile)
    if cache is not None:
        stored[profile.name] = {"key": key, "truth": {**truth.__dict__, "curve": truth.curve}}
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(stored, indent=1, sort_keys=True))
    return truth


def tune_simulated(profile: Profile, method: str, seed: int, precision: Precision | None = None,
                   search: SearchSettings | None = None) -> TuneResult:  # fmt: skip
    """One ``gymbench tune`` (sweep or adaptive) against the profile's engine, in simulated time."""
    backend = InProcessBackend(profile.config(seed), max_retries=profile.retries)
    plugins = make_plugins()
    settings = search or SearchSettings(start=profile.start, max_parallelism=4096)

    async def main() -> TuneResult:
        loop = asyncio.get_running_loop()
        collection = Collection.around(backend, TASKS, lambda: plugins.verifier("exact-match", {}),
                                       verify=VerifySettings("exact-match"))  # fmt: skip
        with contextlib.closing(collection):
            counters = Counters(backend.metrics_text, engines=plugins.engine_metrics()) if profile.metrics else None
            prober = Prober(collection, SAMPLE, precision, counters, clock=loop.time)
            search_method = adaptive_search if method == "adaptive" else doubling_sweep
            return await search_method(prober, settings, Strategies.from_plugins(plugins))

    return run_in_simulated_time(main())


@dataclass
class Scored:
    profile: str
    method: str
    seed: int
    knee: float
    knee_error: float
    recommended: int
    delivered_share: float
    """The TRUE throughput at the recommendation ÷ the TRUE plateau."""
    expected_share: float
    plateau_error: float
    wall_s: float
    probes: int
    stop_reason: str
    notes: list[str] = field(default_factory=list)
    knee_low: float = 0.0
    knee_high: float = 0.0
    """The reported knee's 95% interval."""
    covered: bool = False
    """Whether that interval holds the true knee."""


def score(profile: Profile, truth: Truth, result: TuneResult, seed: int) -> Scored:
    return Scored(
        profile.name, result.method, seed, result.knee.parallelism, result.knee.parallelism / truth.knee - 1,
        result.recommended, truth.share_at(result.recommended), result.expected_share,
        result.knee.plateau / truth.plateau - 1, result.wall_s, len(result.probes), result.stop_reason, result.notes,
        result.knee.low, result.knee.high, result.knee.low <= truth.knee <= result.knee.high,
    )  # fmt: skip


def knee_fraction() -> float:
    return KNEE_FRACTION
