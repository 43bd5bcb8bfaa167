"""Every parameter of the simulated server, and the presets named after what they imitate."""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gymbench.errors import GymbenchError
from gymbench.types import JSONObject

OUTPUT_DISTRIBUTIONS = ("fixed", "uniform", "exponential", "max_tokens")


@dataclass(frozen=True)
class SimConfig:
    """The engine's knobs. Times are seconds; token counts are the simulator's own tokens."""

    model: str = field(default="gymbench-sim", metadata={"help": "model name the server serves and lists"})
    model_aliases: tuple[str, ...] = field(
        default=(),
        metadata={"help": "other model names it answers to (as vLLM's --served-model-name); others get 404"},
    )
    seed: int = field(default=0, metadata={"help": "seed for output lengths, answers and faults"})
    # --- continuous batching
    max_num_seqs: int = field(default=64, metadata={"help": "sequences running at once, at most"})
    step_base_s: float = field(default=0.02, metadata={"help": "fixed cost of one engine step"})
    step_per_seq_s: float = field(default=0.0005, metadata={"help": "added step cost per running sequence"})
    step_curve_s: dict[int, float] = field(
        default_factory=dict,
        metadata={
            "help": "measured decode step time by running sequences, e.g. {1: 0.0005, 4: 0.0011}: replaces "
            "step_base_s + step_per_seq_s*n (linear between points, the last two points' slope beyond)"
        },
    )
    prefill_per_token_s: float = field(
        default=0.00001, metadata={"help": "added step cost per prompt token prefilled in the step"}
    )
    max_num_batched_tokens: int = field(
        default=8192, metadata={"help": "prefill token budget per step (longer prompts are chunked)"}
    )
    max_waiting: int | None = field(
        default=None, metadata={"help": "waiting-queue length beyond which requests get 429 (none: no limit)"}
    )
    kv_cache_tokens: int | None = field(
        default=None,
        metadata={"help": "KV-cache capacity in tokens; a request reserves prompt+output tokens (none: no limit)"},
    )
    # --- output lengths
    output_tokens_dist: str = field(
        default="fixed", metadata={"help": f"output length distribution: {', '.join(OUTPUT_DISTRIBUTIONS)}"}
    )
    output_tokens_mean: int = field(default=32, metadata={"help": "mean output length in tokens"})
    max_output_tokens: int = field(default=4096, metadata={"help": "cap on output tokens when a request sets none"})
    answer_accuracy: float = field(
        default=0.8, metadata={"help": "probability that an answerable task is answered correctly"}
    )
    tool_call_rate: float = field(
        default=0.5,
        metadata={"help": "probability of calling a tool when tools are offered with tool_choice auto"},
    )
    # --- hosted-API limits
    rpm_limit: float | None = field(default=None, metadata={"help": "requests per minute (429 beyond)"})
    tpm_limit: float | None = field(default=None, metadata={"help": "tokens per minute (429 beyond)"})
    # --- faults
    error_rate: float = field(default=0.0, metadata={"help": "fraction of requests answered with a 5xx"})
    hang_rate: float = field(
        default=0.0, metadata={"help": "fraction of requests never answered (until the client gives up)"}
    )
    reset_rate: float = field(
        default=0.0, metadata={"help": "fraction of responses whose connection is reset mid-response"}
    )
    warmup_s: float = field(default=0.0, metadata={"help": "slow-start period after the server starts"})
    warmup_slowdown: float = field(
        default=4.0, metadata={"help": "step-time multiplier at start, easing to 1 over warmup_s"}
    )
    speed_drift: float = field(
        default=0.0,
        metadata={"help": "the machine's speed swings by this share over speed_drift_period_s (a sine)"},
    )
    speed_drift_period_s: float = field(default=600.0, metadata={"help": "period of speed_drift's swing"})
    collapse_threshold: int | None = field(
        default=None, metadata={"help": "waiting requests beyond which steps slow down (thrashing)"}
    )
    collapse_slope: float = field(
        default=1.0,
        metadata={"help": "added step-time factor per max_num_seqs waiting requests beyond the threshold"},
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_aliases", tuple(self.model_aliases))  # JSON and YAML give lists
        object.__setattr__(self, "step_curve_s", _whole_number_keys(self.step_curve_s))
        problems = list(_problems(self))
        if problems:
            raise GymbenchError("invalid simulator configuration: " + "; ".join(problems))

    @property
    def served_models(self) -> tuple[str, ...]:
        return (self.model, *(alias for alias in self.model_aliases if alias != self.model))

    @property
    def instant(self) -> bool:
        """Zero-cost steps: answers leave at once, so only HTTP and client costs remain."""
        if self.step_curve_s:
            return all(v == 0 for v in self.step_curve_s.values()) and self.prefill_per_token_s == 0
        return self.step_base_s == 0 and self.step_per_seq_s == 0 and self.prefill_per_token_s == 0

    def decode_step_s(self, running: float) -> float:
        """A decode step's time with ``running`` sequences (prefill not included).

        Linear ``a + b·n`` unless a measured curve is given: a real engine's step is rarely linear
        in the batch (llama.cpp on a CPU: 0.5, 0.85 and 1.1 ms at 1, 2 and 4 sequences), and a line
        through such points misses the knee. Between the curve's points it is interpolated
        linearly; below the first it is the first; beyond the last it goes on with the last two
        points' slope (never falling), as the step keeps growing with the batch.
        """
        if not self.step_curve_s:
            return self.step_base_s + self.step_per_seq_s * running
        ns = sorted(self.step_curve_s)
        ts = [self.step_curve_s[n] for n in ns]
        if running <= ns[0]:
            return ts[0]
        if running >= ns[-1]:
            slope = max(0.0, (ts[-1] - ts[-2]) / (ns[-1] - ns[-2])) if len(ns) > 1 else 0.0
            return ts[-1] + slope * (running - ns[-1])
        i = bisect.bisect_left(ns, running)  # ns[i-1] < running <= ns[i]
        return ts[i - 1] + (ts[i] - ts[i - 1]) * (running - ns[i - 1]) / (ns[i] - ns[i - 1])

    def replace(self, **changes: Any) -> SimConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> JSONObject:
        return dataclasses.asdict(self)


def _whole_number_keys(curve: Mapping[Any, float]) -> dict[Any, float]:
    """``step_curve_s`` keyed by whole numbers, however it came: a profile's YAML and the settings give
    ints, but JSON (how every configuration reaches the simulator process, ``--config-json``) has text
    keys only, so ``{1: 0.01}`` arrives as ``{"1": 0.01}``. Keys that are not whole numbers are left
    for the check to name."""
    return {int(key) if isinstance(key, str) and key.strip().isdigit() else key: value for key, value in curve.items()}


MAX_TOKENS = 1_000_000
"""The most tokens a sequence, a prompt batch or an output may have: a million, past every model's
context today. The simulator builds each answer's tokens when the request comes, so an output of
1e8 tokens held its server's event loop for minutes (no answer, no ``/metrics``, Ctrl-C ignored)."""
MAX_REQUESTS = 10_000_000
"""The most requests a queue (``max_waiting``, ``collapse_threshold``) may count: ten million."""


class Range(NamedTuple):
    """Where a setting makes physical sense, inclusive at both ends; ``unit`` follows each number
    in the message (``" s"``, ``" tokens"``)."""

    low: float
    high: float
    unit: str = ""
    what: str = ""
    """What the number is, when the name does not say (``"a share"``, ``"a factor"``)."""


RANGES: dict[str, Range] = {
    "seed": Range(-(2**63), 2**64 - 1),
    "max_num_seqs": Range(1, 1_000_000, " sequences"),
    "step_base_s": Range(0, 60.0, " s"),
    "step_per_seq_s": Range(0, 10.0, " s"),
    "prefill_per_token_s": Range(0, 1.0, " s"),
    "max_num_batched_tokens": Range(1, 10 * MAX_TOKENS, " tokens"),
    "max_waiting": Range(0, MAX_REQUESTS, " requests"),
    "kv_cache_tokens": Range(1, 1_000 * MAX_TOKENS, " tokens"),
    "output_tokens_mean": Range(1, MAX_TOKENS, " tokens"),
    "max_output_tokens": Range(1, MAX_TOKENS, " tokens"),
    "answer_accuracy": Range(0, 1),
    "tool_call_rate": Range(0, 1),
    "rpm_limit": Range(1, 1_000_000_000, " requests/min"),
    "tpm_limit": Range(1, 1_000_000_000_000, " tokens/min"),
    "error_rate": Range(0, 1),
    "hang_rate": Range(0, 1),
    "reset_rate": Range(0, 1),
    "warmup_s": Range(0, 3600.0, " s"),
    "warmup_slowdown": Range(1, 100.0, what="a step-time factor"),
    "speed_drift": Range(0, 0.9, what="a share of the speed"),
    "speed_drift_period_s": Range(1.0, 86_400.0, " s"),
    "collapse_threshold": Range(0, MAX_REQUESTS, " requests"),
    "collapse_slope": Range(0, 1_000.0, what="a step-time factor"),
}
"""Every numeric simulator setting's range, checked once where a configuration is made (a profile,
a preset, ``+sim.*``, ``sim-server``'s settings). A step of a minute is far above any engine (a
decode step takes milliseconds) and far below a simulator that never answers: a profile with
``step_base_s: 1.0e308`` was accepted and the collect against it ignored Ctrl-C. The multipliers
(warm-up, drift, collapse) are bounded too, so every step the engine sleeps is finite."""
STEP_LIMITS_S = {name: RANGES[name].high for name in ("step_base_s", "step_per_seq_s", "prefill_per_token_s")}


def _shown(value: float) -> str:
    if isinstance(value, int):
        return f"{value:,}" if abs(value) < 10**15 else f"a {len(str(abs(value)))}-digit number"
    return f"{value:g}"


def _out_of_range(name: str, value: Any) -> str | None:
    """The problem with a numeric setting's value, or ``None`` (unset, or within :data:`RANGES`)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    low, high, unit, what = RANGES[name]
    if not math.isfinite(value):
        return f"{name} must be a finite number, got {value}"
    if low <= value <= high:
        return None
    span = f"{what + ' ' if what else ''}from {_shown(low)} to {_shown(high)}{unit}"
    if value < low == 0:
        head = "must not be negative"
    else:
        head = f"must be at least {_shown(low)}{unit}" if value < low else f"must be at most {_shown(high)}{unit}"
    return f"{name} {head}, got {_shown(value)} ({span})"


def _problems(config: SimConfig) -> list[str]:
    found = [
        f"{field.name} must be a finite number, got {getattr(config, field.name)}"
        for field in dataclasses.fields(config)
        if field.name not in RANGES
        and isinstance(getattr(config, field.name), float)
        and not math.isfinite(getattr(config, field.name))
    ]
    found += [problem for name in RANGES if (problem := _out_of_range(name, getattr(config, name, None)))]
    found += _curve_problems(config.step_curve_s)
    if not all(isinstance(name, str) and name for name in config.served_models):
        found.append(f"model and model_aliases must be non-empty names, got {list(config.served_models)}")
    if config.error_rate + config.hang_rate + config.reset_rate > 1:
        found.append("error_rate + hang_rate + reset_rate must not exceed 1")
    if config.output_tokens_dist not in OUTPUT_DISTRIBUTIONS:
        found.append(
            f"output_tokens_dist must be one of {', '.join(OUTPUT_DISTRIBUTIONS)}, got {config.output_tokens_dist!r}"
        )
    return found


def _curve_problems(curve: Mapping[Any, Any]) -> list[str]:
    """``step_curve_s``'s points: running sequences as ``max_num_seqs`` may be, a step as ``step_base_s``."""
    most_running, most_s = RANGES["max_num_seqs"].high, RANGES["step_base_s"].high
    found = []
    for running, seconds in curve.items():
        if isinstance(running, bool) or not isinstance(running, int) or not 1 <= running <= most_running:
            found.append(
                f"step_curve_s: running sequences must be whole numbers from 1 to {_shown(most_running)}, "
                f"got {running!r}"
            )
        elif isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= most_s:
            found.append(f"step_curve_s[{running}]: a step must take from 0 to at most {most_s:g} s, got {seconds!r}")
    return found


PRESETS: dict[str, dict[str, Any]] = {
    "vllm-like": {
        "max_num_seqs": 64,
        "step_base_s": 0.02,
        "step_per_seq_s": 0.0005,
        "prefill_per_token_s": 0.00001,
        "output_tokens_mean": 32,
    },
    "sglang-like": {
        "max_num_seqs": 128,
        "step_base_s": 0.015,
        "step_per_seq_s": 0.0003,
        "prefill_per_token_s": 0.000008,
        "max_num_batched_tokens": 16384,
        "output_tokens_mean": 32,
    },
    "hosted-api": {
        "max_num_seqs": 1024,
        "step_base_s": 0.02,
        "step_per_seq_s": 0.00001,
        "prefill_per_token_s": 0.0,
        "output_tokens_mean": 32,
        "rpm_limit": 600,
        "tpm_limit": 100_000,
    },
    "small-slow": {
        "max_num_seqs": 4,
        "step_base_s": 0.03,
        "step_per_seq_s": 0.002,
        "prefill_per_token_s": 0.00005,
        "max_waiting": 32,
        "output_tokens_mean": 16,
    },
    "degrading": {
        "max_num_seqs": 32,
        "step_base_s": 0.02,
        "step_per_seq_s": 0.0005,
        "output_tokens_mean": 16,
        "collapse_threshold": 16,
        "collapse_slope": 2.0,
    },
    "flaky": {
        "max_num_seqs": 64,
        "step_base_s": 0.02,
        "step_per_seq_s": 0.0005,
        "output_tokens_mean": 16,
        "error_rate": 0.05,
        "reset_rate": 0.02,
    },
    "zero-latency": {
        "max_num_seqs": 100_000,
        "step_base_s": 0.0,
        "step_per_seq_s": 0.0,
        "prefill_per_token_s": 0.0,
        "output_tokens_mean": 8,
    },
}
PRESET_HELP = {
    "vllm-like": "a GPU engine like vLLM: 64 sequences, 20 ms steps (the default)",
    "sglang-like": "a GPU engine like SGLang: 128 sequences, cheaper steps",
    "hosted-api": "a hosted API like OpenAI's: large capacity, 600 RPM / 100k TPM limits",
    "small-slow": "a small slow server: 4 sequences, a 32-request queue (429 beyond)",
    "degrading": "thrashes: steps slow down once more than 16 requests wait",
    "flaky": "5% server errors and 2% connection resets",
    "zero-latency": "answers at once: measures HTTP and client costs only",
}
DEFAULT_PRESET = "vllm-like"


def config_from_preset(
    preset: str | None = None, overrides: Mapping[str, Any] | None = None, profile: str | None = None
) -> SimConfig:
    """A configuration from a preset, then a calibrated profile's settings (a YAML file, see
    :mod:`gymbench.sim.profile`), then explicit overrides, each of them type-checked (a number
    given as text is read as a setting on the command line is; unknown keys are an error)."""
    from gymbench.settings import build_settings

    name = preset or DEFAULT_PRESET
    if name not in PRESETS:
        raise GymbenchError(f"unknown simulator preset {name!r}; known presets: {', '.join(PRESETS)}")
    known = {f.name for f in dataclasses.fields(SimConfig)}
    for key in overrides or {}:
        if key not in known:
            raise GymbenchError(f"unknown simulator setting {key!r}; settings are: {', '.join(sorted(known))}")
    fitted = load_profile(profile) if profile else {}
    return build_settings(SimConfig, (), PRESETS[name], fitted, dict(overrides or {}), where="simulator")


def load_profile(path: str) -> dict[str, Any]:
    """A calibrated profile's settings (:mod:`gymbench.sim.profile`), each checked: a bad one is one
    error naming the file and the key (``engine.yaml: sim.step_base_s: ...``)."""
    from gymbench.settings import SettingsFile, build_settings
    from gymbench.sim.profile import read_profile

    settings = read_profile(path)
    known = {f.name for f in dataclasses.fields(SimConfig)}
    for key, value in settings.items():  # one at a time, so the message names the key
        if key not in known:
            raise GymbenchError(
                f"{path}: sim.{key}: unknown simulator setting; settings are: {', '.join(sorted(known))}"
            )
        try:
            build_settings(SimConfig, (), SettingsFile({key: value}, str(path)))
        except GymbenchError as exc:
            message = str(exc).removeprefix(f"{path}: ").removeprefix("invalid simulator configuration: ")
            raise GymbenchError(f"{path}: sim.{key}: {message}") from None
    return settings


def slowed(config: SimConfig, factor: float) -> SimConfig:
    """``config`` with every step cost ``factor`` times as long (a replica on a slower machine)."""
    if factor == 1.0:
        return config
    return dataclasses.replace(
        config,
        step_base_s=config.step_base_s * factor,
        step_per_seq_s=config.step_per_seq_s * factor,
        prefill_per_token_s=config.prefill_per_token_s * factor,
        step_curve_s={seqs: step * factor for seqs, step in config.step_curve_s.items()},
    )
