"""The engine's theoretical capacity, computed from its parameters alone.

With ``a`` = step_base_s, ``b`` = step_per_seq_s, ``c`` = prefill_per_token_s, ``L_in`` and
``L_out`` the mean prompt and output tokens, a step with ``n`` running sequences takes on average

    T(n) = a + n · (b + c · L_in / L_out)

(each sequence is prefilled once in its ``L_out`` steps; with a measured ``step_curve_s``, its
value at ``n`` replaces ``a + b·n``). A request occupies its slot for
``L_out`` steps and, in a closed loop, waits on average half a step to be admitted, so ``n``
clients below saturation get

    X(n) = n / ((L_out + 1/2) · T(n))   requests/s.

The engine saturates at ``n* = min(max_num_seqs, kv_cache_tokens / R)`` running sequences, ``R``
the KV reservation of a running sequence; beyond it a waiting queue keeps every slot busy and
throughput is ``X_max = n* / (L_out · T(n*))``, further capped by the per-step prefill budget
(``X · T · L_in ≤ max_num_batched_tokens``) and by hosted-API limits (``rpm/60`` requests/s and
``tpm / (60 · (L_in + max_tokens))``). Warm-up and overload collapse are transient and left out.

With fixed output lengths ``R = L_in + L_out``. When lengths vary, a long request holds its
reservation for longer, so the sequences running at any moment are length-biased: their mean
reservation is ``L_in + E[L_out²] / E[L_out]`` (``L_in + 2·L_out`` for exponential lengths,
``L_in + 4/3·L_out`` for uniform ones), and fewer of them fit. Against the engine itself (a
kv_cache_tokens=3200 server, 23-token prompts, mean 32 output tokens) the fixed-length formula
read 36.7 requests/s for every distribution where the engine gives 33.9 (uniform) and 29.4
(exponential); this one reads 34.1 and 29.8: the 1-1.5% left is FIFO head-of-line blocking (the
first waiting request waits for room even when a smaller one would fit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gymbench.sim.config import SimConfig


@dataclass(frozen=True)
class Capacity:
    saturation_concurrency: int
    max_requests_per_s: float
    max_output_tokens_per_s: float
    step_time_at_saturation_s: float
    latency_at_saturation_s: float
    limited_by: str
    prompt_tokens: float
    output_tokens: float

    def throughput_at(self, config: SimConfig, concurrency: int) -> float:
        """Predicted requests/s for ``concurrency`` closed-loop clients."""
        if concurrency <= 0:
            return 0.0
        if concurrency <= self.saturation_concurrency:
            step = step_time(config, concurrency, self.prompt_tokens, self.output_tokens)
            predicted = concurrency / ((self.output_tokens + 0.5) * step) if step > 0 else float("inf")
            return min(predicted, self.max_requests_per_s)
        return self.max_requests_per_s


def output_lengths(config: SimConfig, max_tokens: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The output length's distribution, exactly as the simulator draws it: (lengths, probabilities)."""
    cap = max_tokens if max_tokens is not None else config.max_output_tokens
    mean = config.output_tokens_mean
    if config.output_tokens_dist == "max_tokens":
        return np.array([float(max_tokens if max_tokens is not None else mean)]), np.array([1.0])
    if config.output_tokens_dist == "uniform":
        drawn = np.arange(1, 2 * mean, dtype=float)
        return np.minimum(drawn, cap), np.full(len(drawn), 1 / len(drawn))
    if config.output_tokens_dist == "exponential":
        drawn = np.arange(0, min(cap, 60 * mean) + 1, dtype=float)  # round(X), X ~ Exp(mean)
        upper = np.exp(-np.maximum(0.0, drawn - 0.5) / mean)
        share = upper - np.exp(-(drawn + 0.5) / mean)
        share[-1] = upper[-1]  # everything beyond is capped
        return np.clip(drawn, 1, cap), share
    return np.array([float(min(mean, cap))]), np.array([1.0])


def mean_output_tokens(config: SimConfig, max_tokens: int | None) -> float:
    lengths, shares = output_lengths(config, max_tokens)
    return float(lengths @ shares)


def kv_reservation(config: SimConfig, prompt_tokens: float, max_tokens: int | None) -> float:
    """Mean KV tokens reserved by a *running* sequence: ``L_in + E[L²]/E[L]`` (length-biased)."""
    lengths, shares = output_lengths(config, max_tokens)
    return prompt_tokens + float((lengths**2) @ shares) / float(lengths @ shares)


def step_time(config: SimConfig, running: float, prompt_tokens: float, output_tokens: float) -> float:
    prefill = config.prefill_per_token_s * prompt_tokens / output_tokens
    return config.decode_step_s(running) + running * prefill


def describe(config: SimConfig, prompt_tokens: float = 32, max_tokens: int | None = None) -> Capacity:
    """Capacity for requests of ``prompt_tokens`` prompt tokens and the given ``max_tokens``."""
    l_out = mean_output_tokens(config, max_tokens)
    l_in = float(prompt_tokens)
    running: float = config.max_num_seqs
    limited_by = "max_num_seqs"
    if config.kv_cache_tokens is not None:
        kv_fit = max(1.0, config.kv_cache_tokens / kv_reservation(config, l_in, max_tokens))
        if config.output_tokens_dist in ("fixed", "max_tokens"):
            kv_fit = float(int(kv_fit + 1e-9))  # whole sequences
        if kv_fit < running:
            running, limited_by = kv_fit, "kv_cache_tokens"
    step = step_time(config, running, l_in, l_out)
    limits = {limited_by: running / (l_out * step) if step > 0 else float("inf")}
    if step > 0:
        limits["max_num_batched_tokens"] = config.max_num_batched_tokens / (l_in * step)
    if config.rpm_limit is not None:
        limits["rpm_limit"] = config.rpm_limit / 60
    if config.tpm_limit is not None:
        reserved = l_in + (max_tokens if max_tokens is not None else config.max_output_tokens)
        limits["tpm_limit"] = config.tpm_limit / (60 * reserved)
    limited_by, rate = min(limits.items(), key=lambda item: item[1])
    saturation = math.ceil(running - 1e-9)
    if limited_by in ("rpm_limit", "tpm_limit", "max_num_batched_tokens") and step > 0:
        saturation = _concurrency_reaching(config, rate, l_in, l_out, saturation)
        step = step_time(config, saturation, l_in, l_out)  # what the step is where it saturates
    latency = l_out * step if step > 0 else 0.0
    return Capacity(
        saturation_concurrency=saturation,
        max_requests_per_s=rate,
        max_output_tokens_per_s=rate * l_out,
        step_time_at_saturation_s=step,
        latency_at_saturation_s=latency,
        limited_by=limited_by,
        prompt_tokens=l_in,
        output_tokens=l_out,
    )


def _concurrency_reaching(config: SimConfig, rate: float, l_in: float, l_out: float, ceiling: int) -> int:
    """The smallest client count whose closed-loop throughput reaches ``rate``."""
    for n in range(1, ceiling + 1):
        if n / ((l_out + 0.5) * step_time(config, n, l_in, l_out)) >= rate:
            return n
    return ceiling


def describe_text(config: SimConfig, capacity: Capacity) -> str:
    if config.step_curve_s:
        curve = ", ".join(f"{n}: {t * 1e3:g}" for n, t in sorted(config.step_curve_s.items()))
        step = f"step = measured curve {{{curve}}} ms by running sequences"
    else:
        step = f"step = {config.step_base_s * 1e3:g} ms + {config.step_per_seq_s * 1e3:g} ms/seq"
    lines = [
        f"engine: max_num_seqs={config.max_num_seqs}, {step} + {config.prefill_per_token_s * 1e6:g} µs/prompt token",
        f"assumed request: {capacity.prompt_tokens:g} prompt tokens, {capacity.output_tokens:g} output tokens",
        f"max throughput: {capacity.max_requests_per_s:.3f} requests/s, "
        f"{capacity.max_output_tokens_per_s:.1f} output tokens/s (limited by {capacity.limited_by})",
        f"saturates at concurrency {capacity.saturation_concurrency}; step there "
        f"{capacity.step_time_at_saturation_s * 1e3:.2f} ms, request latency "
        f"{capacity.latency_at_saturation_s:.3f} s",
        "below saturation, n clients get X(n) = n / ((L_out + 1/2) · T(n)) with T(n) = step(n) + n·c·L_in/L_out",
    ]
    return "\n".join(lines)
